//! Every reader says where its report came from (release, dist, OS, device) as the report
//! states it: the demo crash in each of its forms (text, `.ips`, Sentry event: the same crash,
//! so the same facets), the fixtures' macOS text reports, an SDK report, the Android
//! tombstones (their build fingerprint) and the Linux minidump (its system info).

use symcluster_engine::facets::ReportFacets;
use symcluster_engine::model::Modules;
use symcluster_engine::{LocalSymCaches, minidump, parse_report};

use crate::support::{fixture, repo};

fn facets_of(path: &std::path::Path) -> ReportFacets {
    let data = std::fs::read(path).unwrap();
    parse_report(&data)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .facets
}

fn facets(release: &str, dist: Option<&str>, os: &str, device: Option<&str>) -> ReportFacets {
    ReportFacets {
        release: Some(release.into()),
        dist: dist.map(Into::into),
        os: Some(os.into()),
        device: device.map(Into::into),
    }
}

/// `DemoApp.crash` says `Version: 1 (1.0)` (iOS: build, then version), the `.ips` header
/// `app_version 1.0`, `build_version 1` and its body `bundleInfo`, the Sentry event
/// `release: com.example.DemoApp@1.0+1`: one release, one OS, one device.
#[test]
fn the_demo_crash_has_the_same_facets_in_every_format() {
    let demo = repo().join("examples/ios-demo");
    let expected = facets(
        "com.example.DemoApp@1.0+1",
        None,
        "iOS 15.0 (19A346)",
        Some("iPhone13,2"),
    );
    assert_eq!(facets_of(&demo.join("DemoApp.crash")), expected);
    assert_eq!(facets_of(&demo.join("DemoApp.ips")), expected);
    let sentry = facets_of(&demo.join("DemoApp-sentry.json"));
    assert_eq!(
        sentry,
        ReportFacets {
            dist: Some("1".into()),
            ..expected
        }
    );
}

#[test]
fn macos_text_reports_name_their_release_without_a_build() {
    // macOS writes `Version: 4.21.1` (no build).
    assert_eq!(
        facets_of(&fixture("apple-crash-reports/fixtures/bruno.txt")),
        facets(
            "com.YourCompany.YetAnotherMac@4.21.1",
            None,
            "macOS 10.14.0 (18A391)",
            Some("MacBookPro14,3"),
        )
    );
    // OS X 10.8, `Version: 512`.
    assert_eq!(
        facets_of(&fixture(
            "apple-crash-reports/fixtures/XCDYouTubeKit-54.txt"
        )),
        facets(
            "com.AlphaSoft.iTubeDownloader@512",
            None,
            "macOS 10.8.5 (12F45)",
            Some("MacBookPro5,3"),
        )
    );
}

/// The SDK's `metadata` (`sdk-ios/src/lib.rs` `metadata_json`): `app_version` is
/// `version (build)`.
#[test]
fn an_sdk_report_names_the_app_os_and_machine() {
    let report = serde_json::json!({
        "metadata": {"os": "iOS", "os_version": "17.2 (21C62)", "machine": "iPhone15,2",
                     "arch": "arm64", "app": "DemoApp", "app_version": "1.2 (34)", "pid": 7},
        "modules": [],
        "stacktraces": [{"is_requesting": true, "frames": [{"instruction_addr": "0x1000"}]}]
    });
    let parsed = parse_report(&serde_json::to_vec(&report).unwrap()).unwrap();
    assert_eq!(
        parsed.facets,
        facets(
            "DemoApp@1.2+34",
            None,
            "iOS 17.2 (21C62)",
            Some("iPhone15,2")
        )
    );
}

#[test]
fn tombstones_name_the_os_and_device_of_their_build_fingerprint() {
    let linux = repo().join("examples/linux-demo");
    // `symcluster/demo/x86_64:14/DEMO/1:user/release-keys`, in text and in protobuf.
    let demo = ReportFacets {
        os: Some("Android 14 (DEMO)".into()),
        device: Some("symcluster x86_64".into()),
        ..Default::default()
    };
    assert_eq!(facets_of(&linux.join("demo-app-tombstone.txt")), demo);
    assert_eq!(facets_of(&linux.join("demo-app-tombstone.pb")), demo);
    // Sentry's real one: `google/bluejay/bluejay:16/BP3A.250905.014/…`.
    let gz =
        std::fs::read(repo().join("examples/third-party/sentry-java/tombstone.pb.gz")).unwrap();
    let mut data = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut data).unwrap();
    assert_eq!(
        parse_report(&data).unwrap().facets,
        ReportFacets {
            os: Some("Android 16 (BP3A.250905.014)".into()),
            device: Some("google bluejay".into()),
            ..Default::default()
        }
    );
}

/// minidump-writer writes version 0.0.0 and `uname -srvm` as the build: the kernel release is
/// the OS.
#[test]
fn a_linux_minidump_names_its_kernel() {
    let data = std::fs::read(repo().join("examples/linux-demo/demo-app.dmp")).unwrap();
    let sources =
        LocalSymCaches::scan(&[repo().join("examples/linux-demo/demo-app.debug")]).unwrap();
    let table = sources.unwind_table(&minidump::read_images(&data).unwrap());
    let report = minidump::stackwalk(&data, &table, Modules::Referenced).unwrap();
    assert_eq!(
        report.facets,
        ReportFacets {
            os: Some("Linux 6.18.44-fc-v595".into()),
            ..Default::default()
        }
    );
}
