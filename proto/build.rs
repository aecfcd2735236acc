//! Compiles the `.proto` files with tonic-prost-build, using the protoc binary shipped by the
//! `protoc-bin-vendored` crate so that no system protoc is needed. `PROTOC` is set only for this
//! build script's own process, never globally.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded at this point.
    unsafe { std::env::set_var("PROTOC", protoc) };
    let protos = [
        "proto/symcluster/v1/jobs.proto",
        "proto/symcluster/v1/ingest.proto",
        "proto/symcluster/v1/admin.proto",
        "proto/symcluster/v1/worker.proto",
        "proto/symcluster/v1/uploads.proto",
        "proto/symcluster/cluster/v1/index.proto",
        "proto/symcluster/cluster/v1/peer.proto",
    ];
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out.join("symcluster_descriptor.bin"))
        .compile_protos(&protos, &["proto"])?;
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    Ok(())
}
