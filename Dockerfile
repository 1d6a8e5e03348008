# syntax=docker/dockerfile:1
#
# One small static image for both components: `rebound controller` and
# `rebound agent` are subcommands of the one binary.
#
#   docker build -t registry.example.com/rebound:0.1.0 .
#
# Build stage: a fully static binary for musl (rustls and ring, no OpenSSL,
# no glibc), so the final image needs no libc at all.
# The toolchain CI tests with (rust-version in Cargo.toml is the minimum).
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
COPY benches ./benches
COPY tests ./tests
# `rebound demo` embeds the shipped samples (include_str!).
COPY samples ./samples
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin rebound --target "$(cat /rust-target)" \
 && cp "target/$(cat /rust-target)/release/rebound" /rebound

# Runtime stage: distroless static (no shell, no package manager), non-root
# user 65532 by default. The node agent overrides the user to 0 in its
# DaemonSet to read /dev/kmsg with CAP_SYSLOG only (docs/operations.md).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /rebound /usr/local/bin/rebound
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/rebound"]
CMD ["controller"]
