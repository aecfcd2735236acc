//! gRPC over TLS (rustls) with a CA made for the test (rcgen): three masters (their Raft
//! transport over TLS too), a worker presenting a client certificate, clients and `symctl`.

use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};
use symcluster_client::{Client, ClientError, Tls, api};
use symcluster_loadtest::cluster::{Cluster, MasterOptions, TOKEN, TlsFiles, repo};

use crate::support::{app_frames, http_status, result, upload_dsyms, wait};

/// Writes a CA, a certificate for the masters (`127.0.0.1` to `.3`, server and client use) and one for
/// a worker (client use) into `dir`.
fn make_certificates(dir: &Path) -> TlsFiles {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "symcluster test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf = |name: &str, sans: Vec<String>, usages: Vec<ExtendedKeyUsagePurpose>| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(sans).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = usages;
        let cert = params.signed_by(&key, &ca).unwrap();
        let (cert_path, key_path) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    };
    let (master_cert, master_key) = leaf(
        "master",
        // (127.0.0.2 and .3: masters with `--peer-listen` listen one per loopback address.)
        vec![
            "127.0.0.1".into(),
            "127.0.0.2".into(),
            "127.0.0.3".into(),
            "localhost".into(),
        ],
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
    );
    let worker = leaf(
        "worker",
        Vec::new(),
        vec![ExtendedKeyUsagePurpose::ClientAuth],
    );
    let ca_path = dir.join("ca.pem");
    std::fs::write(&ca_path, ca.pem()).unwrap();
    TlsFiles {
        ca: ca_path,
        master_cert,
        master_key,
        worker_cert: Some(worker),
    }
}

/// Uploads DemoApp's dSYM, submits its crash as `job_id` and checks its crashing frame
/// exactly; the client it used.
async fn demo_crash_symbolicates(cluster: &Cluster, job_id: &str) -> Client {
    upload_dsyms(cluster, &[repo().join("examples/ios-demo/DemoApp.dSYM")]);
    let report = std::fs::read(repo().join("examples/ios-demo/DemoApp.crash")).unwrap();
    let mut client = cluster.client().await;
    client.submit_native(job_id, report).await.unwrap();
    let job = wait(&mut client, job_id).await;
    assert_eq!(
        app_frames(&result(&job), &["DemoApp"])[0],
        ("crash_write_null".to_owned(), "crash.c".to_owned(), 23)
    );
    client
}

/// Three masters and a worker over TLS symbolicate DemoApp's crash exactly; a plaintext
/// client, a client that does not trust the CA, and a worker call without a client certificate
/// are refused; `symctl status` works with `--tls-ca`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_over_tls_symbolicates_and_refuses_plaintext() {
    let certs = tempfile::tempdir().unwrap();
    let files = make_certificates(certs.path());
    let cluster = Cluster::start(
        1,
        MasterOptions {
            masters: 3,
            tls: Some(files.clone()),
            ..MasterOptions::default()
        },
    )
    .await;
    assert!(cluster.endpoint.starts_with("https://127.0.0.1:"));
    let client = demo_crash_symbolicates(&cluster, "over-tls").await;

    // Plaintext to a TLS port, and TLS without trusting the test CA: no connection.
    let port = cluster.masters[0].port;
    // (The TCP connection opens; the master's TLS layer drops it at the first plaintext
    // HTTP/2 bytes. Which error the client sees depends on timing: a cancelled call, an HTTP/2
    // protocol error, a broken pipe. What matters is that no call gets through.)
    let plaintext = Client::connect(&format!("http://127.0.0.1:{port}"), TOKEN).await;
    assert!(
        plaintext.is_err(),
        "a plaintext client connected to a TLS master"
    );
    let untrusted = Client::connect(&cluster.masters[0].endpoint(), TOKEN).await;
    match untrusted {
        Err(ClientError::Connect { message, .. }) => {
            assert!(message.contains("certificate"), "{message}")
        }
        other => panic!(
            "a client that does not trust the CA connected: {:?}",
            other.err()
        ),
    }

    // The worker API needs a client certificate (the master has --tls-client-ca); with the
    // worker's certificate the call goes through.
    let refused = client
        .worker_api()
        .register(api::RegisterRequest {
            worker_id: "no-cert".into(),
            slots: 1,
            prefetch: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    assert_eq!(
        refused.message(),
        "the WorkerApi service needs a client certificate signed by the cluster's client CA"
    );
    let (cert, key) = files.worker_cert.clone().unwrap();
    let with_cert = Tls::from_files(Some(&files.ca), Some(&cert), Some(&key)).unwrap();
    let worker = Client::connect_with(&cluster.endpoint, TOKEN, with_cert)
        .await
        .unwrap();
    worker
        .worker_api()
        .register(api::RegisterRequest {
            worker_id: "with-cert".into(),
            slots: 1,
            prefetch: 0,
        })
        .await
        .unwrap();

    let out = cluster.symctl(&["status"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("leader"), "{stdout}");
    let out = cluster.symctl(&["status", "--output", "json"]);
    assert!(out.status.success());
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let masters = status["masters"].as_array().unwrap();
    assert_eq!(masters.len(), 3, "{status}");
    let leaders: Vec<&serde_json::Value> =
        masters.iter().filter(|m| m["role"] == "leader").collect();
    assert_eq!(leaders.len(), 1, "{status}");
    assert_eq!(leaders[0]["address"], status["leader"], "{status}");
    let worker = status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["worker_id"] == "worker-0")
        .expect("worker-0 listed");
    assert_eq!(worker["connected"], true, "{status}");
    assert_eq!(worker["slots"], 2, "{status}");

    // The Raft transport: a certificate of the cluster's CA that does not name member 2's host
    // cannot speak for member 2, and no batch carries another member's messages.
    use symcluster_client::BearerToken;
    use symcluster_proto::cluster::v1::{RaftBatch, peer_client::PeerClient};
    let step = |identity: (std::path::PathBuf, std::path::PathBuf), batch: RaftBatch| {
        let endpoint = cluster.masters[0].endpoint();
        let tls = Tls::from_files(Some(&files.ca), Some(&identity.0), Some(&identity.1)).unwrap();
        async move {
            let uri = endpoint.clone();
            let channel = tls
                .apply(
                    tonic::transport::Endpoint::from_shared(endpoint).unwrap(),
                    &uri,
                )
                .unwrap()
                .connect()
                .await
                .unwrap();
            PeerClient::with_interceptor(
                channel,
                BearerToken::new(symcluster_loadtest::cluster::TOKEN).unwrap(),
            )
            .step(batch)
            .await
        }
    };
    let from_worker = step(
        files.worker_cert.clone().unwrap(),
        RaftBatch {
            from: 2,
            messages: Vec::new(),
        },
    )
    .await
    .unwrap_err();
    assert_eq!(
        (from_worker.code(), from_worker.message()),
        (
            tonic::Code::PermissionDenied,
            "the client certificate is not valid for 127.0.0.1, the host of member 2: a master \
             speaks only for itself"
        )
    );
    // raft-rs's `eraftpb.Message` with `to` = 1 and `from` = 3 (fields 2 and 3, varints).
    let from_another = step(
        (files.master_cert.clone(), files.master_key.clone()),
        RaftBatch {
            from: 2,
            messages: vec![vec![0x10, 0x01, 0x18, 0x03]],
        },
    )
    .await
    .unwrap_err();
    assert_eq!(
        (from_another.code(), from_another.message()),
        (
            tonic::Code::PermissionDenied,
            "a message from member 3 in a batch from member 2"
        )
    );
}

/// What the Kubernetes manifests run: three masters over mutual TLS with the Raft transport on
/// its own port (`--peer-listen`), and a worker. The plain-HTTP probes the manifests use
/// (`/live`, `/ready` on the metrics port) answer while gRPC is TLS-only; the Raft transport is
/// not served on the client port, and its own port refuses a client without a certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masters_with_a_peer_port_over_mutual_tls_answer_the_probes() {
    let certs = tempfile::tempdir().unwrap();
    let files = make_certificates(certs.path());
    let peer_port = symcluster_loadtest::cluster::free_port();
    let cluster = Cluster::start(
        1,
        MasterOptions {
            masters: 3,
            tls: Some(files.clone()),
            peer_port: Some(peer_port),
            ..MasterOptions::default()
        },
    )
    .await;
    // A leader was elected over the peer ports, and the group replicates: a job completes.
    demo_crash_symbolicates(&cluster, "peer-port").await;

    // symctl with a profile of its config file (masters, token file, project, CA) and no
    // SYMCLUSTER_* variable reaches the cluster; a former flag spelling still works, with a
    // deprecation note on stderr that `--quiet` leaves out.
    let config_dir = tempfile::tempdir().unwrap();
    let token_file = config_dir.path().join("admin.token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let config = config_dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[profiles.tls]\nmaster = {:?}\ntoken_file = {:?}\nproject = \"default\"\ntls_ca = {:?}\n",
            cluster.endpoint,
            token_file.display().to_string(),
            files.ca.display().to_string()
        ),
    )
    .unwrap();
    let symctl = |args: &[&str], profile_env: Option<&str>| {
        let mut command = std::process::Command::new(symcluster_loadtest::cluster::bin("symctl"));
        command.args(args).env("SYMCTL_CONFIG", &config);
        for name in [
            "SYMCLUSTER_MASTER",
            "SYMCLUSTER_TOKEN",
            "SYMCLUSTER_PROJECT",
            "SYMCLUSTER_TLS_CA",
            "SYMCTL_PROFILE",
        ] {
            command.env_remove(name);
        }
        if let Some(profile) = profile_env {
            command.env("SYMCTL_PROFILE", profile);
        }
        command.output().unwrap()
    };
    let out = symctl(&["--profile", "tls", "status", "-o", "json"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["masters"].as_array().unwrap().len(), 3, "{status}");
    let out = symctl(&["job", "--format", "json", "peer-port"], Some("tls"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["state"], "completed", "{printed}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "symctl: `--format` of `symctl job` is deprecated and goes in the next release: use \
         `--output`\n"
    );
    let out = symctl(&["-q", "job", "--format", "json", "peer-port"], Some("tls"));
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    let out = symctl(&["--profile", "staging", "status"], None);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "symctl: {}: no profile \"staging\" (profiles: tls)\n",
            config.display()
        )
    );

    for master in &cluster.masters {
        let metrics = master.metrics_address();
        assert_eq!(
            http_status(&metrics, "/live").await,
            (200, "live\n".to_owned())
        );
        assert_eq!(
            http_status(&metrics, "/ready").await,
            (200, "ready\n".to_owned())
        );
    }
    let worker = &cluster.worker_metrics[0];
    assert_eq!(
        http_status(worker, "/live").await,
        (200, "live\n".to_owned())
    );
    assert_eq!(
        http_status(worker, "/ready").await,
        (200, "ready\n".to_owned())
    );

    // The client port no longer serves the Raft transport.
    use symcluster_client::BearerToken;
    use symcluster_proto::cluster::v1::{RaftBatch, peer_client::PeerClient};
    let connect = |address: String, identity: Option<(std::path::PathBuf, std::path::PathBuf)>| {
        let tls = match &identity {
            Some((cert, key)) => Tls::from_files(Some(&files.ca), Some(cert), Some(key)),
            None => Tls::from_files(Some(&files.ca), None, None),
        }
        .unwrap();
        async move {
            tls.apply(
                tonic::transport::Endpoint::from_shared(address.clone()).unwrap(),
                &address,
            )
            .unwrap()
            .connect()
            .await
        }
    };
    let master_identity = (files.master_cert.clone(), files.master_key.clone());
    let batch = RaftBatch {
        from: 2,
        messages: Vec::new(),
    };
    let on_client_port = connect(cluster.masters[0].endpoint(), Some(master_identity.clone()))
        .await
        .unwrap();
    let refused = PeerClient::with_interceptor(on_client_port, BearerToken::new(TOKEN).unwrap())
        .step(batch.clone())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unimplemented, "{refused:?}");

    // The peer port: a TLS client without a certificate does not get through the handshake.
    let peer_address = format!("https://127.0.0.1:{peer_port}");
    match connect(peer_address.clone(), None).await {
        Err(_) => {}
        Ok(channel) => {
            // (Whether the refusal shows at connect or at the first call depends on TLS 1.3's
            // timing: the server checks the client's certificate after the client's Finished.)
            let call = PeerClient::with_interceptor(channel, BearerToken::new(TOKEN).unwrap())
                .step(batch.clone())
                .await;
            assert!(call.is_err(), "a client without a certificate reached Peer");
            assert_ne!(
                call.unwrap_err().code(),
                tonic::Code::PermissionDenied,
                "refused by the service, not by the TLS handshake"
            );
        }
    }
    // With the masters' certificate it reaches the transport, which checks who speaks: member
    // 1's certificate names 127.0.0.1, so it may speak for member 1 and for no other.
    let with_cert = connect(peer_address, Some(master_identity)).await.unwrap();
    let answer = PeerClient::with_interceptor(with_cert, BearerToken::new(TOKEN).unwrap())
        .step(RaftBatch {
            from: 1,
            messages: Vec::new(),
        })
        .await;
    assert!(answer.is_ok(), "{answer:?}");
}
