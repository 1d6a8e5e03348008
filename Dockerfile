# syntax=docker/dockerfile:1
#
# Two images from one source: `rebound controller` and `rebound agent` are
# subcommands of the one binary, built two ways.
#
# Neither image contains the simulator (the rebound-sim crate behind the
# binary's default `sim` feature): both build with --no-default-features
# (tests/it/workspace.rs checks the crate graph of these exact flags).
#
#   docker build -t registry.example.com/rebound:0.1.0 .
#       the controller image (the default, last stage): a static musl binary
#       on distroless static. It also runs `rebound agent`, but only with
#       the kernel-log, dcgmi and npu-smi sources: a static binary cannot
#       load the NVIDIA driver's glibc libnvidia-ml.so.1.
#   docker build --target agent -t registry.example.com/rebound-agent:0.1.0 .
#       the node agent image: a glibc binary with the `nvml` feature on
#       distroless cc, which loads libnvidia-ml.so.1 at run time from the
#       NVIDIA container toolkit's injection or a host driver mount
#       (docs/agent.md, chart values agent.image and agent.nvml).
#
# The toolchain CI tests with (rust-version in Cargo.toml is the minimum).
# Build stage of the controller: a fully static binary for musl (rustls and
# ring, no OpenSSL, no glibc), so the final image needs no libc at all.
# --no-default-features: without `nvml` (see crates/rebound/Cargo.toml) and
# without `sim` (see Cargo.toml [features]).
FROM rust:1.95-bookworm AS build
ARG TARGETARCH
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/*
RUN case "${TARGETARCH:-amd64}" in \
      amd64) echo x86_64-unknown-linux-musl > /rust-target ;; \
      arm64) echo aarch64-unknown-linux-musl > /rust-target ;; \
      *) echo "unsupported TARGETARCH ${TARGETARCH}" >&2; exit 1 ;; \
    esac \
 && rustup target add "$(cat /rust-target)"
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY crates ./crates
COPY tests ./tests
# rebound-core embeds the shipped samples (include_str!).
COPY samples ./samples
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p rebound-cli --no-default-features --bin rebound --target "$(cat /rust-target)" \
 && cp "target/$(cat /rust-target)/release/rebound" /rebound

# Build stage of the agent: the host's glibc target (bookworm, glibc 2.36,
# the same as distroless cc-debian12), dynamically linked, with the `nvml`
# feature and without the simulator (`sim`, the other default feature).
FROM rust:1.95-bookworm AS build-agent
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY crates ./crates
COPY tests ./tests
COPY samples ./samples
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target-agent \
    CARGO_TARGET_DIR=/src/target-agent cargo build --release --locked -p rebound-cli --no-default-features --features nvml --bin rebound \
 && cp /src/target-agent/release/rebound /rebound

# The agent image: distroless cc (glibc, libgcc; no shell). The DaemonSet
# runs it as root with CAP_SYSLOG only (docs/operations.md).
FROM gcr.io/distroless/cc-debian12:nonroot AS agent
COPY --from=build-agent /rebound /usr/local/bin/rebound
USER 65532:65532
EXPOSE 9102
ENTRYPOINT ["/usr/local/bin/rebound"]
CMD ["agent"]

# Runtime stage of the controller (the default target, so last): distroless
# static (no shell, no package manager), non-root user 65532 by default.
FROM gcr.io/distroless/static-debian12:nonroot AS controller
COPY --from=build /rebound /usr/local/bin/rebound
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/rebound"]
CMD ["controller"]
