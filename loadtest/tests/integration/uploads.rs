//! Uploads through the cluster (`Uploads` service, `symctl upload` without `--s3-bucket`),
//! against real masters, a real Garage and real tokens: a build machine holds an `upload` token
//! of its project and no bucket credentials; files the bucket holds are not sent again; a file
//! over the multipart threshold goes in parts and an upload cut half-way resumes; the masters
//! refuse what they did not presign, what S3 no longer accepts, and objects holding other bytes.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use sha2::{Digest, Sha256};
use symcluster_client::{Client, ClientError, api};
use symcluster_loadtest::cluster::{Cluster, MasterOptions, repo};
use symcluster_sources::upload::{MULTIPART_THRESHOLD, part_size};
use symcluster_sources::{Scope, layout};

use crate::support::{app_frames, result, wait};
use crate::tokens::cluster_with_tokens_and;

const UPLOAD_A: &str = "upload-a-secret";
const INGEST_A: &str = "ingest-a-secret";
const DEMO_APP: &str = "4c4c443b-5555-3144-a126-3cc30cf88fdb";

fn tokens() -> [(&'static str, &'static str, &'static str); 2] {
    [
        ("build-machine-a", UPLOAD_A, "upload\nprojects = [\"a\"]"),
        ("ingest-a", INGEST_A, "ingest\nprojects = [\"a\"]"),
    ]
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn succeeded(out: &Output) -> String {
    let (stdout, stderr) = text(out);
    assert!(out.status.success(), "{stdout}{stderr}");
    stdout
}

fn failed(out: &Output) -> String {
    let (stdout, stderr) = text(out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    stderr
}

async fn client_as(cluster: &Cluster, token: &str) -> Client {
    Client::connect_with(&cluster.endpoint, token, cluster.tls())
        .await
        .expect("connect")
}

/// PUTs `body` as a presigned request says: the HTTP status and S3's answer.
async fn put(request: &api::PresignedRequest, body: Vec<u8>) -> (u16, String) {
    let mut builder = reqwest::Client::new().put(&request.url).body(body);
    for header in &request.headers {
        builder = builder.header(&header.name, &header.value);
    }
    let response = builder.send().await.expect("reach Garage");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn status_of(e: ClientError) -> tonic::Status {
    match e {
        ClientError::Status(status) => status,
        other => panic!("not a refusal: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_token_uploads_its_projects_files_once_and_nothing_else() {
    let (cluster, _tokens) = cluster_with_tokens_and(1, &tokens(), MasterOptions::default()).await;
    let mut ingest = client_as(&cluster, INGEST_A).await;
    let report = std::fs::read(repo().join("examples/ios-demo/DemoApp.crash")).unwrap();
    ingest.submit_native("before-dsym", report).await.unwrap();
    let job = wait(&mut ingest, "before-dsym").await;
    assert_eq!((job.project.as_str(), job.revision), ("a", 1));
    assert!(job.missing.iter().any(|m| m.key == DEMO_APP));

    // The build machine: an upload token, no bucket settings, no AWS credentials.
    let dsym = repo().join("examples/ios-demo/DemoApp.dSYM");
    let dsym = dsym.to_str().unwrap();
    let first = succeeded(&cluster.symctl_as(UPLOAD_A, &["upload", "dsym", dsym]));
    let key = layout::debug_file_key(&Scope::Project("a").prefix(""), &DEMO_APP.parse().unwrap());
    assert!(
        first.contains(&format!("{DEMO_APP} arm64"))
            && first.contains(&format!("-> {key} (uploaded)")),
        "{first}"
    );
    let size = std::fs::metadata(
        repo().join("examples/ios-demo/DemoApp.dSYM/Contents/Resources/DWARF/DemoApp"),
    )
    .unwrap()
    .len();
    assert!(
        first.contains("1 uploaded, 0 already there")
            && first.contains("1 job that lacked these files is being symbolicated again"),
        "{first}"
    );
    let job = wait(&mut ingest, "before-dsym").await;
    assert_eq!(job.revision, 2);
    assert_eq!(
        app_frames(&result(&job), &["DemoApp"])[0],
        ("crash_write_null".to_owned(), "crash.c".to_owned(), 23)
    );
    // In the bucket, under project a, with its size and SHA-256.
    let stored = cluster
        .garage
        .bucket()
        .await
        .stored(&key)
        .await
        .unwrap()
        .unwrap();
    let bytes = std::fs::read(
        repo().join("examples/ios-demo/DemoApp.dSYM/Contents/Resources/DWARF/DemoApp"),
    )
    .unwrap();
    assert_eq!(
        (stored.size, stored.sha256),
        (size, Some(<[u8; 32]>::from(Sha256::digest(&bytes))))
    );

    // The same folder again: nothing sent, and said so.
    let second = succeeded(&cluster.symctl_as(UPLOAD_A, &["upload", "dsym", dsym]));
    assert!(
        second.contains(&format!("-> {key} (already there)"))
            && second.contains("0 uploaded, 1 already there; 0 B sent"),
        "{second}"
    );
    assert!(!second.contains("symbolicated again"), "{second}");

    // `debug-files find` sees it, for the project.
    let found = succeeded(&cluster.symctl_as(UPLOAD_A, &["debug-files", "find", DEMO_APP]));
    assert!(
        found.starts_with(&format!("{DEMO_APP}: {key} ({size} bytes, SHA-256 ")),
        "{found}"
    );
    let absent = failed(&cluster.symctl_as(
        UPLOAD_A,
        &[
            "debug-files",
            "find",
            "11111111-2222-3333-4444-555555555555",
        ],
    ));
    assert!(
        absent.contains("the cluster has no debug file for 11111111"),
        "{absent}"
    );

    // Not into another project, not into the shared prefix.
    let other = failed(&cluster.symctl_as(UPLOAD_A, &["upload", "dsym", "--project", "b", dsym]));
    assert!(other.contains("does not serve project \"b\""), "{other}");
    let shared = failed(&cluster.symctl_as(UPLOAD_A, &["upload", "dsym", "--shared", dsym]));
    assert!(
        shared.contains("uploading to the shared prefix needs an admin token"),
        "{shared}"
    );
    // Nothing but uploads: no job reads, no submits.
    let read = failed(&cluster.symctl_as(UPLOAD_A, &["job", "before-dsym"]));
    assert!(read.contains("role"), "{read}");
    let mut uploader = client_as(&cluster, UPLOAD_A).await;
    let refused = uploader
        .submit_native(
            "from-a-build-machine",
            std::fs::read(repo().join("examples/ios-demo/DemoApp.crash")).unwrap(),
        )
        .await
        .unwrap_err();
    assert_eq!(status_of(refused).code(), tonic::Code::PermissionDenied);
    // And an ingest token uploads nothing through the cluster.
    let ingest_upload = failed(&cluster.symctl_as(INGEST_A, &["upload", "dsym", dsym]));
    assert!(ingest_upload.contains("role"), "{ingest_upload}");
}

/// A small ELF with a GNU build id, grown past the multipart threshold by a section of
/// pseudo-random bytes (`objcopy --add-section`): its path and debug id.
fn big_elf(dir: &Path) -> (PathBuf, String) {
    let source = dir.join("big.c");
    std::fs::write(&source, "int main(void) { return 0; }\n").unwrap();
    let small = dir.join("small");
    let built = std::process::Command::new("cc")
        .args(["-g", "-Wl,--build-id=sha1", "-o"])
        .arg(&small)
        .arg(&source)
        .status()
        .unwrap();
    assert!(built.success());
    // xorshift64: incompressible, and the same every run.
    let size = (MULTIPART_THRESHOLD + (36 << 20)) as usize;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut pad = Vec::with_capacity(size);
    while pad.len() < size {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        pad.extend_from_slice(&state.to_le_bytes());
    }
    std::fs::write(dir.join("pad"), &pad).unwrap();
    let big = dir.join("big");
    let padded = std::process::Command::new("objcopy")
        .arg(format!("--add-section=.pad={}", dir.join("pad").display()))
        .arg(&small)
        .arg(&big)
        .status()
        .unwrap();
    assert!(padded.success());
    let objects =
        symcluster_engine::debug_files::describe_objects(&std::fs::read(&big).unwrap()).unwrap();
    (big, objects[0].debug_id.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_over_the_threshold_goes_in_parts_and_an_upload_cut_half_way_resumes() {
    let (cluster, _tokens) = cluster_with_tokens_and(0, &tokens(), MasterOptions::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let (big, debug_id) = big_elf(dir.path());
    let bytes = std::fs::read(&big).unwrap();
    let size = bytes.len() as u64;
    let each = part_size(size) as usize;
    let parts: Vec<Vec<u8>> = bytes
        .chunks(each)
        .map(|c| Sha256::digest(c).to_vec())
        .collect();
    assert_eq!(parts.len(), 7, "100 MiB in parts of 16 MiB");

    // A first upload cut after three parts (as a killed symctl leaves it).
    let uploader = client_as(&cluster, UPLOAD_A).await;
    let prepared = uploader
        .prepare_upload(api::PrepareUploadRequest {
            files: vec![api::UploadFile {
                kind: Some(api::upload_file::Kind::DebugId(debug_id.clone())),
                size,
                sha256: Sha256::digest(&bytes).to_vec(),
                part_sha256: parts.clone(),
            }],
            ..Default::default()
        })
        .await
        .unwrap();
    let Some(api::prepared_file::Action::Multipart(multipart)) = &prepared.files[0].action else {
        panic!("not multipart: {:?}", prepared.files[0].action);
    };
    assert_eq!((multipart.parts.len(), multipart.parts_present), (7, 0));
    for part in &multipart.parts[..3] {
        let start = (part.part_number as usize - 1) * each;
        let body = bytes[start..(start + each).min(bytes.len())].to_vec();
        let (status, answer) = put(part.request.as_ref().unwrap(), body).await;
        assert_eq!(status, 200, "{answer}");
    }

    // symctl resumes it: the four other parts only.
    let out = succeeded(&cluster.symctl_as(UPLOAD_A, &["upload", "dsym", big.to_str().unwrap()]));
    assert!(
        out.contains("(uploaded in 7 parts, resumed (3 of 7 were there))"),
        "{out}"
    );
    let sent = size - 3 * each as u64;
    assert!(
        out.contains(&format!(
            "1 uploaded, 0 already there; {} sent",
            indicatif_bytes(sent)
        )),
        "{out}"
    );
    let key = layout::debug_file_key(&Scope::Project("a").prefix(""), &debug_id.parse().unwrap());
    let bucket = cluster.garage.bucket().await;
    let stored = bucket.stored(&key).await.unwrap().unwrap();
    assert_eq!(
        (stored.size, stored.sha256),
        (size, Some(<[u8; 32]>::from(Sha256::digest(&bytes))))
    );
    let fetched = bucket.fetch(&key).await.unwrap().unwrap();
    assert!(fetched == bytes, "the object is not the file");
    // The upload's record is gone, and a confirm sent again (the upload completed) holds.
    let whole: [u8; 32] = Sha256::digest(&bytes).into();
    assert_eq!(
        bucket
            .stored(&symcluster_sources::upload::upload_record_key(&key, &whole))
            .await
            .unwrap(),
        None
    );
    let again = uploader
        .confirm_upload(api::ConfirmUploadRequest {
            files: vec![api::ConfirmedFile {
                key: key.clone(),
                ticket: prepared.files[0].ticket.clone(),
                size,
                sha256: whole.to_vec(),
                upload_id: multipart.upload_id.clone(),
                part_sha256: parts.clone(),
            }],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(again.confirmed, 1);
    // And a third run sends nothing.
    let again = succeeded(&cluster.symctl_as(UPLOAD_A, &["upload", "dsym", big.to_str().unwrap()]));
    assert!(
        again.contains("0 uploaded, 1 already there; 0 B sent"),
        "{again}"
    );
}

/// How symctl prints a byte count (indicatif's `HumanBytes`: binary units, two decimals).
fn indicatif_bytes(n: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < units.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.2} {}", units[unit])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_masters_refuse_expired_requests_other_bytes_and_uploads_they_did_not_presign() {
    let (cluster, _tokens) = cluster_with_tokens_and(
        1,
        &tokens(),
        MasterOptions {
            args: vec!["--upload-url-expiry".into(), "2s".into()],
            ..MasterOptions::default()
        },
    )
    .await;
    let uploader = client_as(&cluster, UPLOAD_A).await;
    let mut ingest = client_as(&cluster, INGEST_A).await;
    let report = std::fs::read(repo().join("examples/ios-demo/DemoApp.crash")).unwrap();
    ingest.submit_native("lacks-demo", report).await.unwrap();
    assert_eq!(wait(&mut ingest, "lacks-demo").await.revision, 1);

    let declared = std::fs::read(
        repo().join("examples/ios-demo/DemoApp.dSYM/Contents/Resources/DWARF/DemoApp"),
    )
    .unwrap();
    let file = api::UploadFile {
        kind: Some(api::upload_file::Kind::DebugId(DEMO_APP.into())),
        size: declared.len() as u64,
        sha256: Sha256::digest(&declared).to_vec(),
        part_sha256: Vec::new(),
    };
    let request = api::PrepareUploadRequest {
        files: vec![file.clone()],
        ..Default::default()
    };
    let prepared = uploader.prepare_upload(request.clone()).await.unwrap();
    let answer = &prepared.files[0];
    let Some(api::prepared_file::Action::Put(put_request)) = &answer.action else {
        panic!("not a PUT: {:?}", answer.action);
    };

    // Other bytes than declared: S3 refuses them (the SHA-256 is signed into the request).
    let mut other = declared.clone();
    other[100] ^= 1;
    let (status, refusal) = put(put_request, other.clone()).await;
    assert_eq!(status, 400, "{refusal}");
    // Past the expiry, S3 refuses the request itself.
    while now_ms() <= prepared.expires_at_ms + 1_000 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // (Garage 2.5 answers 400 "Date is too old"; AWS S3 403 AccessDenied "Request has
    // expired".)
    let (status, refusal) = put(put_request, declared.clone()).await;
    assert_eq!(status, 400, "{refusal}");
    assert!(refusal.contains("Date is too old"), "{refusal}");

    // Another tool puts other bytes under the key: the confirm says so, and the job that lacks
    // the file is not queued again.
    let bucket = cluster.garage.bucket().await;
    bucket.put(&answer.key, other.clone()).await.unwrap();
    let confirmed = api::ConfirmedFile {
        key: answer.key.clone(),
        ticket: answer.ticket.clone(),
        size: file.size,
        sha256: file.sha256.clone(),
        upload_id: String::new(),
        part_sha256: Vec::new(),
    };
    let refused = status_of(
        uploader
            .confirm_upload(api::ConfirmUploadRequest {
                files: vec![confirmed.clone()],
                missing_keys: vec![DEMO_APP.into()],
                ..Default::default()
            })
            .await
            .unwrap_err(),
    );
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert_eq!(
        refused.message(),
        format!(
            "{}: the bucket's object has no SHA-256 (another tool put it there): upload it again",
            answer.key
        )
    );
    // Other bytes uploaded through the cluster (so with their SHA-256): the first ticket's
    // confirm names both digests.
    let other_prepared = uploader
        .prepare_upload(api::PrepareUploadRequest {
            files: vec![api::UploadFile {
                sha256: Sha256::digest(&other).to_vec(),
                ..file.clone()
            }],
            ..Default::default()
        })
        .await
        .unwrap();
    let Some(api::prepared_file::Action::Put(other_put)) = &other_prepared.files[0].action else {
        panic!("an object without a SHA-256 is sent again");
    };
    assert_eq!(put(other_put, other.clone()).await.0, 200);
    let refused = status_of(
        uploader
            .confirm_upload(api::ConfirmUploadRequest {
                files: vec![confirmed.clone()],
                missing_keys: vec![DEMO_APP.into()],
                ..Default::default()
            })
            .await
            .unwrap_err(),
    );
    assert_eq!(
        refused.message(),
        format!(
            "{}: the bucket holds other bytes than declared (SHA-256 {} there, {} declared)",
            answer.key,
            hex::encode(Sha256::digest(&other)),
            hex::encode(Sha256::digest(&declared))
        )
    );
    let job = wait(&mut ingest, "lacks-demo").await;
    assert_eq!(job.revision, 1, "a refused confirm requeues nothing");
    // Keys alone requeue only for files the bucket holds.
    let keys_only = uploader
        .confirm_upload(api::ConfirmUploadRequest {
            missing_keys: vec!["11111111-2222-3333-4444-555555555555".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!((keys_only.confirmed, keys_only.requeued), (0, 0));

    // A ticket for another size, a forged one, a key outside the project: refused.
    for (wrong, expected) in [
        (
            api::ConfirmedFile {
                size: file.size + 1,
                ..confirmed.clone()
            },
            "no master of this cluster presigned this upload",
        ),
        (
            api::ConfirmedFile {
                ticket: "1.00".into(),
                ..confirmed.clone()
            },
            "no master of this cluster presigned this upload",
        ),
        (
            // A good ticket, for another key of the same project.
            api::ConfirmedFile {
                key: layout::debug_file_key(
                    &Scope::Project("a").prefix(""),
                    &"11111111-2222-3333-4444-555555555555".parse().unwrap(),
                ),
                ..confirmed.clone()
            },
            "no master of this cluster presigned this upload",
        ),
    ] {
        let refused = status_of(
            uploader
                .confirm_upload(api::ConfirmUploadRequest {
                    files: vec![wrong],
                    ..Default::default()
                })
                .await
                .unwrap_err(),
        );
        assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
        assert!(
            refused.message().contains(expected),
            "{}",
            refused.message()
        );
    }
    let outside = status_of(
        uploader
            .confirm_upload(api::ConfirmUploadRequest {
                files: vec![api::ConfirmedFile {
                    key: answer.key.replace("projects/a/", "projects/b/"),
                    ..confirmed.clone()
                }],
                ..Default::default()
            })
            .await
            .unwrap_err(),
    );
    assert_eq!(outside.code(), tonic::Code::PermissionDenied);

    // Prepared again and sent as declared: confirmed, and the job runs again.
    let prepared = uploader.prepare_upload(request).await.unwrap();
    let Some(api::prepared_file::Action::Put(put_request)) = &prepared.files[0].action else {
        panic!("other bytes are there: a PUT is due");
    };
    let (status, answer_text) = put(put_request, declared.clone()).await;
    assert_eq!(status, 200, "{answer_text}");
    let done = uploader
        .confirm_upload(api::ConfirmUploadRequest {
            files: vec![api::ConfirmedFile {
                ticket: prepared.files[0].ticket.clone(),
                ..confirmed
            }],
            missing_keys: vec![DEMO_APP.into()],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!((done.confirmed, done.requeued), (1, 1));
    let job = wait(&mut ingest, "lacks-demo").await;
    assert_eq!(job.revision, 2);
}

/// Runs `script` (under `integrations/`) with `env` as a build machine has it: this cluster's
/// masters, no bucket settings, no AWS credentials.
fn run_script(cluster: &Cluster, script: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = std::process::Command::new("sh");
    command
        .arg(repo().join("integrations").join(script))
        .args(args)
        .env("SYMCLUSTER_MASTER", &cluster.endpoint)
        .env("SYMCTL", symcluster_loadtest::cluster::bin("symctl"));
    for (name, _) in &cluster.garage.env {
        command.env_remove(name);
    }
    for name in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "SYMCLUSTER_TOKEN",
    ] {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    command.output().expect("run the script")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_xcode_build_phase_uploads_the_demo_dsym() {
    let (cluster, _tokens) = cluster_with_tokens_and(1, &tokens(), MasterOptions::default()).await;
    let mut ingest = client_as(&cluster, INGEST_A).await;
    let report = std::fs::read(repo().join("examples/ios-demo/DemoApp.crash")).unwrap();
    ingest
        .submit_native("from-testflight", report)
        .await
        .unwrap();
    assert_eq!(wait(&mut ingest, "from-testflight").await.revision, 1);

    // What Xcode sets in a Run Script phase of a Release build.
    let folder = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        repo().join("examples/ios-demo/DemoApp.dSYM"),
        folder.path().join("DemoApp.app.dSYM"),
    )
    .unwrap();
    let folder_path = folder.path().to_str().unwrap();
    let xcode = [
        ("DWARF_DSYM_FOLDER_PATH", folder_path),
        ("DWARF_DSYM_FILE_NAME", "DemoApp.app.dSYM"),
        ("DEBUG_INFORMATION_FORMAT", "dwarf-with-dsym"),
        ("CONFIGURATION", "Release"),
        ("SYMCLUSTER_TOKEN", UPLOAD_A),
    ];
    let out = run_script(&cluster, "xcode/upload-dsyms.sh", &[], &xcode);
    let stdout = succeeded(&out);
    assert!(
        stdout.contains(&format!("{DEMO_APP} arm64"))
            && stdout.contains("1 uploaded, 0 already there")
            && stdout.contains("1 job that lacked these files is being symbolicated again"),
        "{stdout}"
    );
    let job = wait(&mut ingest, "from-testflight").await;
    assert_eq!(job.revision, 2);
    assert_eq!(
        app_frames(&result(&job), &["DemoApp"])[0],
        ("crash_write_null".to_owned(), "crash.c".to_owned(), 23)
    );

    // A Debug build without dSYMs: nothing to upload, said as a warning.
    let mut debug = xcode;
    debug[2] = ("DEBUG_INFORMATION_FORMAT", "dwarf");
    let out = run_script(&cluster, "xcode/upload-dsyms.sh", &[], &debug);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out).1.starts_with(
            "warning: symcluster: DEBUG_INFORMATION_FORMAT is dwarf in Release: no dSYM to upload"
        ),
        "{:?}",
        text(&out)
    );
    // A refused upload is a warning, and an error only when asked.
    let mut wrong = xcode;
    wrong[4] = ("SYMCLUSTER_TOKEN", "not-a-token");
    let out = run_script(&cluster, "xcode/upload-dsyms.sh", &[], &wrong);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out)
            .1
            .contains("warning: symcluster: the dSYMs were not uploaded"),
        "{:?}",
        text(&out)
    );
    let out = run_script(
        &cluster,
        "xcode/upload-dsyms.sh",
        &[],
        &[&wrong[..], &[("SYMCLUSTER_FAIL_BUILD", "1")]].concat(),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out)
            .1
            .contains("error: symcluster: the dSYMs were not uploaded"),
        "{:?}",
        text(&out)
    );
}

/// Runs the React Native script with an upload token of project a on `bundle` and `map`, by
/// release too when `release` is given (bundle name: `bundle`'s file name).
fn rn_script(cluster: &Cluster, bundle: &Path, map: &Path, release: Option<&str>) -> Output {
    let name = bundle.file_name().unwrap().to_str().unwrap();
    let mut args = vec![
        "--bundle",
        bundle.to_str().unwrap(),
        "--sourcemap",
        map.to_str().unwrap(),
    ];
    if let Some(release) = release {
        args.extend(["--release", release, "--bundle-name", name]);
    }
    run_script(
        cluster,
        "react-native/upload-sourcemaps.sh",
        &args,
        &[("SYMCLUSTER_TOKEN", UPLOAD_A)],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_react_native_script_injects_a_debug_id_and_uploads_the_map() {
    let (cluster, _tokens) = cluster_with_tokens_and(1, &tokens(), MasterOptions::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let dist = repo().join("examples/rn-demo/dist");
    let bundle = dir.path().join("index.bundle");
    let map = dir.path().join("index.bundle.map");
    std::fs::copy(dist.join("index.bundle"), &bundle).unwrap();
    std::fs::copy(dist.join("index.bundle.map"), &map).unwrap();
    let out = rn_script(&cluster, &bundle, &map, Some("rn-demo@1.0"));
    let stdout = succeeded(&out);
    // The bundle and its map carry the same debug id.
    let bundle_text = std::fs::read_to_string(&bundle).unwrap();
    let id = bundle_text
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("//# debugId="))
        .unwrap_or_else(|| panic!("no debug id comment at the end: {stdout}"))
        .to_owned();
    let map_json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&map).unwrap()).unwrap();
    assert_eq!(map_json["debugId"], id.as_str());
    assert!(
        stdout.starts_with(&format!("{id} {} {}", bundle.display(), map.display())),
        "{stdout}"
    );
    assert!(stdout.contains("4 uploaded, 0 already there"), "{stdout}");

    // A job with only that id restores the frames a job with release/dist/name restores.
    let stack = std::fs::read(dist.join("stack-v8.txt")).unwrap();
    let mut ingest = client_as(&cluster, INGEST_A).await;
    ingest
        .submit_js(
            "by-debug-id",
            api::JsJob {
                stack: stack.clone(),
                debug_id: id.clone(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    ingest
        .submit_js(
            "by-release",
            api::JsJob {
                stack,
                release: "rn-demo@1.0".into(),
                bundle: "index.bundle".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let by_id = wait(&mut ingest, "by-debug-id").await;
    let by_release = wait(&mut ingest, "by-release").await;
    assert_eq!((by_id.error.as_str(), by_release.error.as_str()), ("", ""));
    let (a, b) = (result(&by_id), result(&by_release));
    assert_eq!(a["frames"], b["frames"]);
    assert_eq!(
        (
            &a["frames"][0]["filename"],
            &a["frames"][0]["lineno"],
            &a["frames"][0]["colno"],
            &a["frames"][0]["function"]
        ),
        (
            &serde_json::json!("/Users/dev/DemoApp/src/pricing.js"),
            &serde_json::json!(22),
            &serde_json::json!(15),
            &serde_json::json!("list.map$argument_0")
        )
    );
    // Hermes: the bundle is bytecode, which takes no comment; the map goes by release.
    let hbc = dir.path().join("index.android.bundle");
    let hbc_map = dir.path().join("index.android.bundle.map");
    std::fs::copy(dist.join("index.android.bundle.hbc"), &hbc).unwrap();
    std::fs::copy(dist.join("index.android.bundle.hbc.map"), &hbc_map).unwrap();
    let out = rn_script(&cluster, &hbc, &hbc_map, Some("rn-demo-hermes@1.0"));
    let (hermes_out, hermes_err) = text(&out);
    assert!(out.status.success(), "{hermes_out}{hermes_err}");
    assert!(
        hermes_err.contains(&format!(
            "warning: symcluster: no debug id in {}: the map is stored by release only",
            hbc.display()
        )) && hermes_out.contains("2 uploaded, 0 already there"),
        "{hermes_out}{hermes_err}"
    );
    ingest
        .submit_js(
            "hermes-by-release",
            api::JsJob {
                stack: std::fs::read(dist.join("stack-hermes.txt")).unwrap(),
                release: "rn-demo-hermes@1.0".into(),
                bundle: "index.android.bundle".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let hermes = result(&wait(&mut ingest, "hermes-by-release").await);
    assert_eq!(
        (
            &hermes["frames"][0]["filename"],
            &hermes["frames"][0]["lineno"]
        ),
        (
            &serde_json::json!("/Users/dev/DemoApp/src/pricing.js"),
            &serde_json::json!(22)
        )
    );

    // Running it again (the next build of the same bundle) sends nothing.
    let again = rn_script(&cluster, &bundle, &map, None);
    let again = succeeded(&again);
    assert!(
        again.contains("(already injected)")
            && again.contains("0 uploaded, 2 already there; 0 B sent"),
        "{again}"
    );
}
