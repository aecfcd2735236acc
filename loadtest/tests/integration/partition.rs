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

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("run `ip` (iproute2)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Namespaces, veths and the bridge of one test; deleted on drop, even when the test fails.
struct TestNetwork {
    tag: u32,
    subnet: String,
}

impl TestNetwork {
    /// `count` hosts `10.213.S.1..count` in namespaces, the bridge at `10.213.S.254`.
    fn new(count: u32) -> Self {
        let tag = std::process::id() % 100_000;
        let net = TestNetwork {
            tag,
            subnet: format!("10.213.{}", tag % 250),
        };
        let bridge = net.bridge();
        ip(&["link", "add", &bridge, "type", "bridge"]);
        ip(&[
            "addr",
            "add",
            &format!("{}.254/24", net.subnet),
            "dev",
            &bridge,
        ]);
        ip(&["link", "set", &bridge, "up"]);
        for host in 1..=count {
            let ns = net.namespace(host);
            let (outside, inside) = (net.veth(host), format!("svi{tag}{host}"));
            ip(&["netns", "add", &ns]);
            ip(&[
                "link", "add", &outside, "type", "veth", "peer", "name", &inside,
            ]);
            ip(&["link", "set", &inside, "netns", &ns]);
            ip(&["link", "set", &outside, "master", &bridge]);
            ip(&["link", "set", &outside, "up"]);
            let address = format!("{}/24", net.address(host));
            ip(&["-n", &ns, "addr", "add", &address, "dev", &inside]);
            ip(&["-n", &ns, "link", "set", &inside, "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        net
    }

    fn bridge(&self) -> String {
        format!("sbr{}", self.tag)
    }

    fn namespace(&self, host: u32) -> String {
        format!("symcluster-{}-{host}", self.tag)
    }

    fn veth(&self, host: u32) -> String {
        format!("svo{}{host}", self.tag)
    }

    fn address(&self, host: u32) -> String {
        format!("{}.{host}", self.subnet)
    }

    /// Cuts (or restores) `host`'s only link.
    fn set_link(&self, host: u32, up: bool) {
        ip(&[
            "link",
            "set",
            &self.veth(host),
            if up { "up" } else { "down" },
        ]);
    }
}

impl Drop for TestNetwork {
    fn drop(&mut self) {
        for host in 1..=3 {
            let _ = Command::new("ip")
                .args(["link", "del", &self.veth(host)])
                .status();
            let _ = Command::new("ip")
                .args(["netns", "del", &self.namespace(host)])
                .status();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge()])
            .status();
    }
}

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
    let net = TestNetwork::new(3);
    let dir = tempfile::tempdir().unwrap();
    let peers: Vec<String> = (1..=3)
        .map(|h| format!("{h}={}:7700", net.address(h)))
        .collect();
    let endpoints: Vec<String> = (1..=3)
        .map(|h| format!("http://{}:7700", net.address(h)))
        .collect();
    let mut masters = Vec::new();
    for host in 1..=3u32 {
        let log = dir.path().join(format!("master-{host}.log"));
        let child = Command::new("ip")
            .args(["netns", "exec", &net.namespace(host)])
            .arg(bin("symcluster-master"))
            .args(["--listen", &format!("{}:7700", net.address(host))])
            .args(["--metrics-listen", &format!("{}:7701", net.address(host))])
            .arg("--data-dir")
            .arg(dir.path().join(format!("data-{host}")))
            .args(["--token", TOKEN, "--id", &host.to_string()])
            .args(["--peers", &peers.join(",")])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start a master in its namespace");
        // `ip netns exec` execs the master: killing this pid kills the master.
        masters.push(Proc {
            child,
            name: format!("master-{host}"),
            log,
        });
    }
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
