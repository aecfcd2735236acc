//! A real network partition: three masters, each in its own network namespace (the project's
//! own test hosts, on a private /24 made for this test and deleted after it), joined by a
//! bridge in the root namespace. The leader's link is cut: it acknowledges nothing more, the
//! other two elect a leader and go on; once the link is back, the old leader follows and holds
//! what was written without it. Needs root and `ip` (iproute2): CI runs as root.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use symcluster_client::{Client, api};
use symcluster_loadtest::cluster::{Proc, TOKEN, repo};
use symcluster_loadtest::network::Network;

fn bin(name: &str) -> PathBuf {
    symcluster_loadtest::cluster::bin(name)
}

async fn status_of(endpoint: &str) -> Option<api::ClusterStatusResponse> {
    let channel = tonic::transport::Endpoint::from_shared(endpoint.to_owned())
        .ok()?
        .connect_timeout(Duration::from_millis(500))
        .timeout(Duration::from_secs(1))
        .connect()
        .await
        .ok()?;
    let mut admin =
        api::admin_client::AdminClient::with_interceptor(channel, |mut r: tonic::Request<()>| {
            r.metadata_mut()
                .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
            Ok(r)
        });
    admin
        .cluster_status(api::ClusterStatusRequest {})
        .await
        .ok()
        .map(|r| r.into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_acknowledges_nothing_and_follows_after_healing() {
    let net = Network::new(3);
    let dir = tempfile::tempdir().unwrap();
    let endpoints: Vec<String> = (1..=3)
        .map(|h| format!("http://{}:7700", net.address(h)))
        .collect();
    let masters = start_masters(&net, dir.path());
    let logs = || {
        masters
            .iter()
            .map(|m| format!("--- {}\n{}", m.name, m.log()))
            .collect::<String>()
    };

    // The masters start listening a moment after they are spawned: retry, bounded.
    let started = Instant::now();
    let mut client = loop {
        match Client::connect(&endpoints.join(","), TOKEN).await {
            Ok(client) => break client,
            Err(e) if started.elapsed() > Duration::from_secs(30) => {
                panic!("no leader: {e}\n{}", logs())
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let leader_endpoint = client.endpoint();
    let leader = endpoints
        .iter()
        .position(|e| *e == leader_endpoint)
        .expect("the leader is one of the masters") as u32
        + 1;
    let report = std::fs::read(repo().join("examples/ios-demo/DemoApp.crash")).unwrap();
    assert!(
        client
            .submit_native("before", report.clone())
            .await
            .unwrap()
            .created
    );

    // Cut the leader off.
    net.set_link(leader, false);
    let cut_at = Instant::now();
    let response = client
        .submit_native("during", report.clone())
        .await
        .unwrap_or_else(|e| panic!("the majority took no submit: {e}\n{}", logs()));
    assert!(response.created);
    eprintln!(
        "partition: first submit acknowledged by the majority {:?} after the cut",
        cut_at.elapsed()
    );
    assert_ne!(client.endpoint(), leader_endpoint);

    // Inside the cut-off namespace, the old leader acknowledges nothing.
    let isolated = Command::new("ip")
        .args(["netns", "exec", &net.namespace(leader)])
        .arg(bin("symctl"))
        .args(["submit", "--job-id", "isolated"])
        .args(["--master", &leader_endpoint, "--token", TOKEN])
        .arg(repo().join("examples/ios-demo/DemoApp.crash"))
        .output()
        .unwrap();
    assert!(
        !isolated.status.success(),
        "the cut-off leader acknowledged a submit: {}",
        String::from_utf8_lossy(&isolated.stdout)
    );
    // By then it has stepped down (it heard no majority for an election timeout): it names no
    // leader, rather than failing some other way.
    let stderr = String::from_utf8_lossy(&isolated.stderr);
    assert!(
        stderr.contains(&format!(
            "cannot connect to {leader_endpoint}: no leader elected among these masters"
        )),
        "{stderr}"
    );
    let missing = client.job("isolated").await.unwrap_err();
    assert!(missing.to_string().contains("no job"), "{missing}");

    // Heal: the old leader follows the new one and holds what was written without it.
    net.set_link(leader, true);
    let new_leader = client.endpoint();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = status_of(&leader_endpoint).await
            && !status.from_leader
            && status.leader == new_leader
            && status.queue_depth == 2
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the old leader did not follow after healing:\n{}",
            logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let job = client.job("during").await.unwrap();
    assert_eq!(job.state, api::JobState::Queued as i32);
    drop(masters);
}

/// Starts masters 1..=3 of `net`, one in each namespace, on data dirs in `dir`. `ip netns
/// exec` execs the master: killing a returned pid kills the master.
fn start_masters(net: &Network, dir: &std::path::Path) -> Vec<Proc> {
    let peers: Vec<String> = (1..=3)
        .map(|h| format!("{h}={}:7700", net.address(h)))
        .collect();
    (1..=3u32)
        .map(|host| {
            let log = dir.join(format!("master-{host}.log"));
            let child = Command::new("ip")
                .args(["netns", "exec", &net.namespace(host)])
                .arg(bin("symcluster-master"))
                .args(["--listen", &format!("{}:7700", net.address(host))])
                .args(["--metrics-listen", &format!("{}:7701", net.address(host))])
                .arg("--data-dir")
                .arg(dir.join(format!("data-{host}")))
                .args(["--token", TOKEN, "--id", &host.to_string()])
                .args(["--peers", &peers.join(",")])
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .expect("start a master in its namespace");
            Proc {
                child,
                name: format!("master-{host}"),
                log,
            }
        })
        .collect()
}

/// A client of the master at `endpoint` alone, when that master says it leads now.
async fn pinned_to_leader(endpoint: &str) -> Option<Client> {
    let client = tokio::time::timeout(Duration::from_secs(1), Client::connect(endpoint, TOKEN))
        .await
        .ok()?
        .ok()?;
    (client.endpoint() == endpoint).then_some(client)
}

/// A leader cut off from both followers, while its clients still reach it, must not answer a
/// read from its own index once the others may have elected a leader and committed without it:
/// a job the new leader acknowledged is read from the old one, which must answer it or refuse
/// (UNAVAILABLE: not the leader), never NOT_FOUND. The old leader steps down within one to two
/// election timeouts (raft-rs's check-quorum runs once per timeout), the followers elect within
/// one to two: the cut is made up to six times, so that the two windows overlap in some.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_its_followers_serves_no_stale_read() {
    let mut net = Network::new(3);
    let dir = tempfile::tempdir().unwrap();
    let masters = start_masters(&net, dir.path());
    let endpoints: Vec<String> = (1..=3)
        .map(|h| format!("http://{}:7700", net.address(h)))
        .collect();
    let logs = || {
        masters
            .iter()
            .map(|m| format!("--- {}\n{}", m.name, m.log()))
            .collect::<String>()
    };
    let report = std::fs::read(repo().join("examples/ios-demo/DemoApp.crash")).unwrap();
    let mut refused = 0;
    for round in 0..6 {
        // The leader now, as its own answer says, with every link up.
        let started = Instant::now();
        let (old, old_client) = loop {
            let mut found = None;
            for (at, endpoint) in endpoints.iter().enumerate() {
                if let Some(client) = pinned_to_leader(endpoint).await {
                    found = Some((at as u32 + 1, client));
                    break;
                }
            }
            match found {
                Some(found) => break found,
                None if started.elapsed() > Duration::from_secs(30) => {
                    panic!("no leader before round {round}\n{}", logs())
                }
                None => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        for other in (1..=3).filter(|&h| h != old) {
            net.cut(old, other);
        }
        // Submit through whichever follower is elected, then at once read from the old leader.
        let job = format!("round-{round}");
        let deadline = Instant::now() + Duration::from_secs(15);
        'elected: loop {
            assert!(
                Instant::now() < deadline,
                "round {round}: no leader among the majority\n{}",
                logs()
            );
            for (at, endpoint) in endpoints.iter().enumerate() {
                if at as u32 + 1 == old {
                    continue;
                }
                let Some(mut new_client) = pinned_to_leader(endpoint).await else {
                    continue;
                };
                if new_client
                    .submit_native(&job, report.clone())
                    .await
                    .is_err()
                {
                    continue;
                }
                let read = old_client
                    .ingest()
                    .get_job(api::GetJobRequest {
                        job_id: job.clone(),
                        ..api::GetJobRequest::default()
                    })
                    .await;
                match read {
                    Ok(_) => {}
                    Err(status) if status.code() == tonic::Code::Unavailable => refused += 1,
                    Err(status) => {
                        panic!(
                            "round {round}: master {old}, cut off, answered a read of a job \
                             the majority acknowledged with {:?}: {}\n{}",
                            status.code(),
                            status.message(),
                            logs()
                        )
                    }
                }
                break 'elected;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        net.heal();
    }
    eprintln!("stale-read probe: the old leader refused {refused} of 6 reads");
    drop(masters);
}
