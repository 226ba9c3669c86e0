# syntax=docker/dockerfile:1
#
# redlock-elector image: a static binary on distroless/static, running as uid 65532, no shell.
# scripts/image.sh builds the same binary with the same flags and the same final-stage content
# without a Docker engine (CI has none), and scripts/check-image.sh fails when the two part on
# user, entrypoint, port, labels, RUSTFLAGS, --target or strip. The target is the build machine's
# (x86_64 or aarch64): a multi-arch build runs the builder stage once per platform.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-slim-bookworm AS builder
WORKDIR /src
# Static glibc: the binary needs no libc in the runtime image. TLS is rustls (no OpenSSL), and
# glibc >= 2.34 resolves hosts (files, dns) without loading NSS modules.
ENV RUSTFLAGS="-C target-feature=+crt-static" \
    CARGO_TERM_COLOR=never
# Dependency layer: build the dependencies against stub sources, so this layer is reused
# until Cargo.toml or Cargo.lock change.
# testkit (the tests' harness) is a workspace member: its manifest, with a stub, must be there for
# cargo to load the workspace; only the sidecar is built.
COPY Cargo.toml Cargo.lock ./
COPY testkit/Cargo.toml ./testkit/
RUN mkdir -p src testkit/src \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs testkit/src/lib.rs \
    && cargo fetch --locked \
    && cargo build --release --locked --target "$(uname -m)-unknown-linux-gnu" \
    && rm -rf src
# The real sources; touch so cargo rebuilds the crate itself, not the dependencies.
COPY src ./src
RUN find src -name '*.rs' -exec touch {} + \
    && cargo build --release --locked --target "$(uname -m)-unknown-linux-gnu" --bin redlock-elector \
    && cp "target/$(uname -m)-unknown-linux-gnu/release/redlock-elector" /redlock-elector \
    && strip /redlock-elector \
    && /redlock-elector --version

FROM gcr.io/distroless/static-debian12:nonroot
# The release passes the Cargo version and the commit (docker build --build-arg VERSION=... --build-arg
# REVISION=...); scripts/image.sh sets the same labels.
ARG VERSION=unknown
ARG REVISION=unknown
LABEL org.opencontainers.image.title="redlock-elector" \
      org.opencontainers.image.source="https://github.com/redlock-elector/redlock-elector" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=builder /redlock-elector /usr/local/bin/redlock-elector
# 65532 = distroless "nonroot"; the chart's securityContext runs the same uid.
USER 65532:65532
# 4041: /metrics and probes. The app-facing API (4040) listens on 127.0.0.1 only.
EXPOSE 4041
ENTRYPOINT ["/usr/local/bin/redlock-elector"]
