//! One connection to the master (the leader): register, heartbeats, the lease stream, results;
//! and the drain that ends the worker.
//!
//! Leases: the worker holds up to its slots plus its prefetch ([`crate::config`]); each job waits
//! in its own task for a slot, gives the slot up once its work is done, and stays registered
//! (its lease renewed by heartbeats) until its outcome is reported.
//!
//! Drain (on the first SIGTERM/SIGINT, see [`crate::shutdown`]):
//! 1. `Drain`: the master grants no more leases and ends the lease stream after the leases it
//!    already sent, which the worker reads to the end (none is left in a buffer to wait for its
//!    lease to expire); from the stop on, no job starts;
//! 2. started jobs finish and report, for at most `--drain-timeout` (heartbeats keep every
//!    held lease alive meanwhile, started or not); a second signal cuts the wait short;
//! 3. jobs still running are stopped, and `Deregister` hands their leases back with those of
//!    the jobs that never started, named apart (`unstarted`: their attempt does not count):
//!    the master queues them again at once, for another worker;
//! 4. the worker exits 0.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use symcluster_client::Client;
use symcluster_proto::v1 as api;
use symcluster_telemetry::trace_context;
use tokio::sync::{Notify, Semaphore};
use tokio::task::AbortHandle;
use tracing::Instrument;

use crate::caches::Caches;
use crate::config::WorkerConfig;
use crate::outcomes::Outcomes;
use crate::runner::{self, Outcome};
use crate::shutdown::Shutdown;

/// The jobs this worker holds leases for, across sessions: each runs holding one slot permit,
/// or waits for one (the prefetch); a handle to stop each.
#[derive(Clone)]
pub struct Jobs {
    slots: u32,
    prefetch: u32,
    permits: Arc<Semaphore>,
    /// By job id and attempt: an attempt that ended late never unregisters a newer one.
    running: Arc<Mutex<HashMap<(String, u32), Held>>>,
    /// Woken when the last started job ends ([`Jobs::wait_idle`]).
    idle: Arc<Notify>,
}

/// A job this worker holds a lease for.
struct Held {
    /// Stops its task.
    abort: AbortHandle,
    /// Whether it took a slot (a job that never starts is handed back by `Deregister`).
    started: bool,
}

impl Jobs {
    /// Room for `slots` jobs at once, and `prefetch` more leases waiting for a slot.
    pub fn new(slots: u32, prefetch: u32) -> Self {
        Jobs {
            slots,
            prefetch,
            permits: Arc::new(Semaphore::new(slots as usize)),
            running: Arc::default(),
            idle: Arc::default(),
        }
    }

    /// The job slots.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// How many jobs run now (hold a slot).
    pub fn busy_slots(&self) -> u32 {
        self.slots
            .saturating_sub(self.permits.available_permits() as u32)
    }

    /// The registration that announces these slots and this prefetch.
    fn register_request(&self, worker_id: &str) -> api::RegisterRequest {
        api::RegisterRequest {
            worker_id: worker_id.to_owned(),
            slots: self.slots,
            prefetch: self.prefetch,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, u32), Held>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ids of the jobs leased to this worker: running, or waiting for a slot.
    pub fn leased_ids(&self) -> Vec<String> {
        self.ids_where(|_| true)
    }

    /// Ids of the jobs held whose entry passes `keep`, sorted, each once.
    fn ids_where(&self, keep: impl Fn(&Held) -> bool) -> Vec<String> {
        let mut ids: Vec<String> = self
            .lock()
            .iter()
            .filter(|(_, held)| keep(held))
            .map(|((id, _), _)| id.clone())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Marks attempt `key` started (it holds a slot), unless a stop was asked for; returns
    /// whether it may run. Checked under the registry's lock, which [`Jobs::wait_idle`] takes
    /// after the stop: a job that starts is always one it waits for.
    fn start(&self, key: &(String, u32), stop: &Shutdown) -> bool {
        let mut running = self.lock();
        if stop.is_requested() {
            return false;
        }
        if let Some(held) = running.get_mut(key) {
            held.started = true;
        }
        true
    }

    /// Unregisters attempt `key`, whose outcome was reported.
    fn end(&self, key: &(String, u32)) {
        let mut running = self.lock();
        running.remove(key);
        if !running.values().any(|held| held.started) {
            self.idle.notify_waiters();
        }
    }

    /// Waits until every started job has ended (its outcome reported), or `within` passed, or
    /// `shutdown` turns urgent; returns whether they all ended. Jobs that never started are
    /// left to `Deregister`.
    async fn wait_idle(&self, within: Duration, shutdown: &mut Shutdown) -> bool {
        let all = async {
            loop {
                let notified = self.idle.notified();
                tokio::pin!(notified);
                // Registered before the check, so that an end between the two still wakes it.
                notified.as_mut().enable();
                if !self.lock().values().any(|held| held.started) {
                    return;
                }
                notified.await;
            }
        };
        tokio::select! {
            all = tokio::time::timeout(within, all) => all.is_ok(),
            () = shutdown.urgent() => false,
        }
    }

    /// Ids of the leased jobs that never started (they waited for a slot). After a stop none
    /// starts any more ([`Jobs::start`]), so the list stays true until `Deregister` hands them
    /// back, as attempts that do not count.
    pub fn unstarted_ids(&self) -> Vec<String> {
        self.ids_where(|held| !held.started)
    }

    /// Stops every job still running (their outcomes are never reported); returns how many had
    /// started.
    fn abort_all(&self) -> usize {
        let held: Vec<((String, u32), Held)> = self.lock().drain().collect();
        for (_, job) in &held {
            job.abort.abort();
        }
        held.iter().filter(|(_, job)| job.started).count()
    }
}

/// How a session that registered ended.
#[derive(Debug)]
pub enum End {
    /// The master closed the lease stream (it stopped leading, or forgot this worker):
    /// reconnect.
    StreamClosed,
    /// The worker drained and deregistered: stop.
    Drained,
    /// The session, registered and leasing, failed (the master went away, the stream broke):
    /// reconnect.
    Lost(anyhow::Error),
}

/// Connects to the master (any of `config.master`: the client finds the leader), registers,
/// and runs leased jobs until the stream ends, or until `shutdown`, when it drains (module
/// docs). A shutdown before the lease stream is open ends the session with `StreamClosed`.
///
/// # Errors
/// Connecting or registering failed; a failure once registered is [`End::Lost`].
pub async fn run(
    config: &WorkerConfig,
    worker_id: &str,
    caches: &Arc<Caches>,
    jobs: &Jobs,
    ready: &crate::metrics::Readiness,
    mut shutdown: Shutdown,
) -> anyhow::Result<End> {
    let connected = tokio::select! {
        connected = connect(config, worker_id, jobs) => connected?,
        () = shutdown.requested() => return Ok(End::StreamClosed),
    };
    let (client, registration) = connected;
    let heartbeat = tokio::spawn(heartbeats(
        client.clone(),
        worker_id.to_owned(),
        jobs.clone(),
        caches.clone(),
        Duration::from_millis(registration.heartbeat_ms.max(100)),
    ));
    let ended = lease_loop(&client, worker_id, caches, jobs, ready, &mut shutdown).await;
    ready.set(false);
    let ended = match ended {
        Ok(Loop::Draining(started)) => {
            let left = config.drain_timeout.saturating_sub(started.elapsed());
            finish_drain(&client, worker_id, jobs, left, &mut shutdown).await;
            Ok(End::Drained)
        }
        Ok(Loop::Closed) => Ok(End::StreamClosed),
        Err(e) => Ok(End::Lost(e)),
    };
    heartbeat.abort();
    ended
}

/// The TLS settings of `config` (`--tls-ca`, `--tls-cert`, `--tls-key`).
fn tls(config: &WorkerConfig) -> anyhow::Result<symcluster_client::Tls> {
    Ok(symcluster_client::Tls::from_files(
        config.tls_ca.as_deref(),
        config.tls_cert.as_deref(),
        config.tls_key.as_deref(),
    )?)
}

async fn connect(
    config: &WorkerConfig,
    worker_id: &str,
    jobs: &Jobs,
) -> anyhow::Result<(Client, api::RegisterResponse)> {
    let client = Client::connect_with(&config.master, &config.token, tls(config)?).await?;
    let registration = client
        .worker_api()
        .register(jobs.register_request(worker_id))
        .await?
        .into_inner();
    Ok((client, registration))
}

/// Renews the running jobs' leases and reports cache counters every `every`, until the master
/// says it forgot this worker (then the session's lease stream ends too).
async fn heartbeats(
    client: Client,
    worker_id: String,
    jobs: Jobs,
    caches: Arc<Caches>,
    every: Duration,
) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let request = api::HeartbeatRequest {
            worker_id: worker_id.clone(),
            running_job_ids: jobs.leased_ids(),
            running: jobs.busy_slots(),
            cache: Some(api::CacheStats {
                hits: caches.counters.hits.load(Ordering::Relaxed),
                misses: caches.counters.misses.load(Ordering::Relaxed),
                memory_bytes: caches.memory_bytes(),
                disk_bytes: caches.disk_bytes(),
            }),
        };
        match client.worker_api().heartbeat(request).await {
            Ok(r) if !r.get_ref().known => {
                tracing::warn!("master forgot this worker; re-registering");
                return;
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
        }
    }
}

/// How the lease loop ended.
enum Loop {
    /// The master closed the stream.
    Closed,
    /// A stop was asked at this instant; the stream was read to its end.
    Draining(Instant),
}

/// Reads the lease stream and starts each job; on `shutdown`, sends `Drain` and reads the
/// stream to its end.
async fn lease_loop(
    client: &Client,
    worker_id: &str,
    caches: &Arc<Caches>,
    jobs: &Jobs,
    ready: &crate::metrics::Readiness,
    shutdown: &mut Shutdown,
) -> anyhow::Result<Loop> {
    let mut leases = client
        .worker_api()
        .lease_jobs(api::LeaseJobsRequest {
            worker_id: worker_id.to_owned(),
        })
        .await?
        .into_inner();
    ready.set(true);
    // Outcomes go over one `ReportOutcomes` call of this session (the jobs' tasks hold it).
    let outcomes = Outcomes::start(client);
    let mut draining = false;
    let mut drain_started = Instant::now();
    loop {
        let lease = tokio::select! {
            biased;
            () = shutdown.requested(), if !draining => {
                draining = true;
                drain_started = Instant::now();
                ready.set(false);
                match client
                    .worker_api()
                    .drain(api::DrainRequest { worker_id: worker_id.to_owned() })
                    .await
                {
                    Ok(r) => tracing::info!(leased = r.get_ref().leased, "draining: no new leases"),
                    // The stream is dropped below: a lease sent meanwhile waits for its expiry.
                    Err(e) => {
                        tracing::warn!(error = %e, "the master did not take the drain; leaving the lease stream");
                        return Ok(Loop::Draining(drain_started));
                    }
                }
                continue;
            }
            lease = leases.message() => lease,
        };
        let lease = match lease {
            Ok(Some(lease)) => lease,
            Ok(None) if draining => return Ok(Loop::Draining(drain_started)),
            Ok(None) => return Ok(Loop::Closed),
            Err(e) if draining => {
                tracing::warn!(error = %e, "lease stream failed while draining");
                return Ok(Loop::Draining(drain_started));
            }
            Err(e) => return Err(e.into()),
        };
        let Some(spec) = lease.job else { continue };
        let job_id = spec.job_id.clone();
        let (client, outcomes, caches, worker_id, registry) = (
            client.clone(),
            outcomes.clone(),
            caches.clone(),
            worker_id.to_owned(),
            jobs.clone(),
        );
        let (permits, mut stop) = (jobs.permits.clone(), shutdown.clone());
        // Registered under the lock its end takes, so that its removal always follows this
        // insert. Registered jobs have their leases renewed by heartbeats, waiting ones too.
        let key = (job_id.clone(), lease.attempt);
        let mut running = jobs.lock();
        let span = tracing::info_span!("job", job_id = %job_id, attempt = lease.attempt,
            worker_id = %worker_id);
        // A child of the master's `lease` span: lease, run and completion form one trace.
        symcluster_telemetry::trace_context::set_parent(&span, &lease.traceparent);
        let task = tokio::spawn(
            async move {
                // A lease may come before a slot is free (the prefetch, or a job the master
                // believes over that still runs here): the job waits for one. A stop asked
                // before it starts wins, even when a slot was handed to it meanwhile: it never
                // starts, stays registered (its lease renewed) and `Deregister` hands it back.
                let permit = tokio::select! {
                    biased;
                    () = stop.requested() => None,
                    permit = permits.acquire_owned() => permit.ok(),
                };
                let key = (job_id, lease.attempt);
                let Some(permit) = permit.filter(|_| registry.start(&key, &stop)) else {
                    return;
                };
                let started = std::time::Instant::now();
                let kind = crate::metrics::kind_label(&spec);
                let outcome = runner::run(spec, &caches, lease.recheck_missing).await;
                let completed = matches!(outcome, Outcome::Completed { .. });
                crate::metrics::JOBS
                    .with_label_values(&[kind, if completed { "completed" } else { "failed" }])
                    .inc();
                crate::metrics::JOB_SECONDS
                    .with_label_values(&[kind])
                    .observe(started.elapsed().as_secs_f64());
                tracing::info!(
                    ms = started.elapsed().as_millis() as u64,
                    ok = completed,
                    "job finished"
                );
                // The slot is free once the work is done: the next job runs while the master
                // commits this one's outcome (the lease stays held, and renewed, until then).
                drop(permit);
                report(&client, &outcomes, &worker_id, &key.0, key.1, outcome).await;
                registry.end(&key);
            }
            .instrument(span),
        );
        running.insert(
            key,
            Held {
                abort: task.abort_handle(),
                started: false,
            },
        );
    }
}

/// How long a stopping worker tries to hand its leases back.
pub const DEREGISTER_TIMEOUT: Duration = Duration::from_secs(10);

/// `Deregister` on the leader; a leader that does not know this worker (a failover since it
/// registered) gets a `Register` first, so that only the worker's own token can end it.
async fn deregister(
    client: &Client,
    worker_id: &str,
    reason: String,
    unstarted: Vec<String>,
    jobs: &Jobs,
) -> anyhow::Result<api::DeregisterResponse> {
    let request = api::DeregisterRequest {
        worker_id: worker_id.to_owned(),
        reason,
        unstarted,
    };
    let call = || {
        client.on_leader(|channel| {
            let request = request.clone();
            async move {
                api::worker_api_client::WorkerApiClient::new(channel)
                    .deregister(request)
                    .await
                    .map(|r| r.into_inner())
            }
        })
    };
    match call().await {
        Err(symcluster_client::ClientError::Status(status))
            if status.code() == tonic::Code::FailedPrecondition =>
        {
            client
                .worker_api()
                .register(jobs.register_request(worker_id))
                .await?;
            Ok(call().await?)
        }
        other => Ok(other?),
    }
}

/// Steps 2–3 of the drain: wait for the running jobs, stop the rest, hand their leases back.
async fn finish_drain(
    client: &Client,
    worker_id: &str,
    jobs: &Jobs,
    timeout: Duration,
    shutdown: &mut Shutdown,
) {
    let all_done = jobs.wait_idle(timeout, shutdown).await;
    // Taken before `abort_all` empties the registry; no job starts after the stop.
    let unstarted = jobs.unstarted_ids();
    let stopped = if all_done { 0 } else { jobs.abort_all() };
    let reason = if all_done {
        "drained".to_owned()
    } else {
        format!("stopping; {stopped} jobs did not finish within the drain timeout")
    };
    let deregistered = tokio::time::timeout(
        DEREGISTER_TIMEOUT,
        deregister(client, worker_id, reason, unstarted, jobs),
    )
    .await
    .unwrap_or_else(|_| Err(anyhow::anyhow!("no answer within {DEREGISTER_TIMEOUT:?}")));
    match deregistered {
        Ok(r) => tracing::info!(
            stopped,
            requeued = r.requeued,
            "drained: deregistered, unfinished jobs handed back"
        ),
        Err(e) => tracing::warn!(
            error = %e,
            stopped,
            "cannot deregister; the jobs left wait for their leases to expire"
        ),
    }
}

/// A drain while no session is open (the master was unreachable when the signal came): wait
/// for the jobs, then hand back what is left if a master answers.
pub async fn drain_disconnected(
    config: &WorkerConfig,
    worker_id: &str,
    jobs: &Jobs,
    shutdown: &Shutdown,
) {
    let mut shutdown = shutdown.clone();
    let client = match tls(config) {
        Ok(tls) => tokio::time::timeout(
            DEREGISTER_TIMEOUT,
            Client::connect_with(&config.master, &config.token, tls),
        )
        .await
        .unwrap_or_else(|_| {
            Err(symcluster_client::ClientError::Connect {
                endpoint: config.master.clone(),
                message: format!("no answer within {DEREGISTER_TIMEOUT:?}"),
            })
        })
        .map_err(anyhow::Error::from),
        Err(e) => Err(e),
    };
    match client {
        Ok(client) => {
            finish_drain(
                &client,
                worker_id,
                jobs,
                config.drain_timeout,
                &mut shutdown,
            )
            .await
        }
        Err(e) => {
            let done = jobs.wait_idle(config.drain_timeout, &mut shutdown).await;
            let stopped = if done { 0 } else { jobs.abort_all() };
            tracing::warn!(error = %e, stopped, "no master reachable; the jobs left wait for their leases to expire");
        }
    }
}

/// Sends a job's outcome to the leader: on the session's `ReportOutcomes` call, or (when that
/// call cannot take it: a failover, a master without it) by its unary call, following the leader
/// through a failover and retrying briefly on transport errors. If it never arrives, the lease
/// expires and the job runs again: nothing is lost.
async fn report(
    client: &Client,
    outcomes: &Outcomes,
    worker_id: &str,
    job_id: &str,
    attempt: u32,
    outcome: Outcome,
) {
    match outcomes
        .report(outcome_request(worker_id, job_id, attempt, &outcome))
        .await
    {
        Ok(answer) if answer.code == 0 => return,
        // Only refusals are final; an answer saying "try the leader" goes by the unary call.
        Ok(answer) if !symcluster_client::is_failover_code(tonic::Code::from(answer.code)) => {
            tracing::warn!(job = job_id, code = ?tonic::Code::from(answer.code),
                error = %answer.message, "the master refused the outcome; the lease will expire");
            return;
        }
        Ok(answer) => {
            tracing::debug!(job = job_id, error = %answer.message, "outcome answered with a failover code; reporting by a unary call");
        }
        Err(status) => {
            tracing::debug!(job = job_id, error = %status, "outcome stream unavailable; reporting by a unary call");
        }
    }
    // Built again only here: a copy of the result for a fallback would cost every job.
    let unary = outcome_request(worker_id, job_id, attempt, &outcome).outcome;
    use api::outcome_request::Outcome as Kind;
    let sent = client
        .on_leader(|channel| {
            let mut api = api::worker_api_client::WorkerApiClient::new(channel);
            let unary = unary.clone();
            // The master's completion span continues this job's trace.
            let span = tracing::Span::current();
            async move {
                match unary {
                    Some(Kind::Complete(r)) => api
                        .complete_job(trace_context::with_parent(tonic::Request::new(r), &span))
                        .await
                        .map(|_| ()),
                    Some(Kind::Fail(r)) => api
                        .fail_job(trace_context::with_parent(tonic::Request::new(r), &span))
                        .await
                        .map(|_| ()),
                    None => Ok(()),
                }
            }
        })
        .await;
    if let Err(e) = sent {
        tracing::warn!(job = job_id, error = %e, "reporting the outcome failed; the lease will expire");
    }
}

/// `outcome` as one request of the `ReportOutcomes` call (its id set by [`Outcomes::report`]),
/// carrying the job's trace context as the unary calls do in metadata.
fn outcome_request(
    worker_id: &str,
    job_id: &str,
    attempt: u32,
    outcome: &Outcome,
) -> api::OutcomeRequest {
    use api::outcome_request::Outcome as Kind;
    let kind = match outcome {
        Outcome::Completed {
            result_zstd,
            group,
            missing,
            call_tree,
            facets,
        } => Kind::Complete(api::CompleteJobRequest {
            worker_id: worker_id.to_owned(),
            job_id: job_id.to_owned(),
            attempt,
            result_json: Vec::new(),
            group: group.clone(),
            result_zstd: result_zstd.clone(),
            missing: missing.clone(),
            call_tree: call_tree.clone(),
            facets: facets.as_deref().cloned(),
        }),
        Outcome::Failed {
            error,
            retryable,
            missing,
        } => Kind::Fail(api::FailJobRequest {
            worker_id: worker_id.to_owned(),
            job_id: job_id.to_owned(),
            attempt,
            error: error.clone(),
            retryable: *retryable,
            missing: missing.clone(),
        }),
    };
    api::OutcomeRequest {
        id: 0,
        outcome: Some(kind),
        traceparent: trace_context::traceparent(&tracing::Span::current()),
    }
}
