# One image for every symcluster binary: symcluster-master, symcluster-worker,
# symcluster-kafka-bridge and symctl, on a small Debian runtime, as a non-root user.
#
#   docker build -t symcluster .
#   docker run --rm symcluster symctl --help
#
# Build stage: the workspace's locked dependencies; protoc 3.x for raft-rs's messages; make and
# a C compiler (in the rust image) for the bundled librdkafka.
FROM rust:1.95-bookworm AS build
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends protobuf-compiler \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The `dist` profile: stripped, thin LTO (symctl 32 MB instead of 221 MB with `release`'s line
# tables).
RUN cargo build --profile dist --locked --bins \
        -p symcluster-master -p symcluster-worker -p symcluster-kafka-bridge -p symctl \
    && mkdir /out \
    && cp target/dist/symcluster-master target/dist/symcluster-worker \
          target/dist/symcluster-kafka-bridge target/dist/symctl /out/

# Runtime: CA roots for https S3 and masters, nothing else.
FROM debian:bookworm-slim
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 symcluster \
    && useradd --system --uid 10001 --gid symcluster --home-dir /var/lib/symcluster symcluster \
    && mkdir -p /var/lib/symcluster /var/cache/symcluster \
    && chown symcluster:symcluster /var/lib/symcluster /var/cache/symcluster
COPY --from=build /out/ /usr/local/bin/
USER 10001:10001
WORKDIR /var/lib/symcluster
# Masters: gRPC 7700, metrics 7701. Workers: metrics and /ready 7702. Bridge: metrics 9810.
EXPOSE 7700 7701 7702 9810
ENTRYPOINT []
CMD ["symcluster-master", "--help"]
