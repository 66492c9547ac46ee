# syntax=docker/dockerfile:1
#
# sluice's container image: built with the Rust toolchain, run on distroless
# (glibc, CA certificates, no shell, no package manager) as a non-root user.
#
#   docker build -t sluice:0.1.0 .
#   docker run --rm sluice:0.1.0 --version
#
# The TLS stack is rustls with aws-lc, SQLite is bundled: the binary needs
# nothing from the image but glibc and libgcc, which distroless/cc carries.

FROM rust:1.95-bookworm AS build
WORKDIR /src
# Cargo.toml names the benchmark and every source file must be present for
# `cargo build`; tests and the rest of the repository are not needed.
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY schemas ./schemas
COPY benches ./benches
COPY conf ./conf
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin sluice \
    && install -D -m 0755 target/release/sluice /out/sluice

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/sluice /usr/local/bin/sluice
COPY conf/local.toml /etc/sluice/example.toml
# 65532 is distroless's "nonroot"; the state dir and a local lake are
# volumes the orchestrator mounts writable for it.
USER 65532:65532
WORKDIR /var/lib/sluice
# [http] listen: /metrics, /healthz, /readyz and the status page.
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["run", "--config", "/etc/sluice/sluice.toml"]
