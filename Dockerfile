# agui-host container image.
#
#   docker build -t agui-host .          (or: podman build --format docker -t agui-host .)
#   docker run -p 8080:8080 -e OPENAI_API_KEY=sk-... agui-host
#
# Every setting comes from the environment (see .env.example); config/ is in the image for
# config/$APP_ENVIRONMENT.toml layers, and a file can be mounted and named by APP_CONFIG_FILE.
# The base images are build arguments, so the image also builds from local or mirrored bases.

ARG RUST_IMAGE=rust:1.95-slim-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

# ---- build -------------------------------------------------------------------------------------
FROM ${RUST_IMAGE} AS builder
# The CA bundle for the runtime image: Debian's Mozilla set, without any certificate this build
# machine added locally (a site's own CA must not end up in a published image).
RUN mkdir -p /out \
 && if ls /usr/share/ca-certificates/mozilla/*.crt >/dev/null 2>&1; then \
      cat /usr/share/ca-certificates/mozilla/*.crt > /out/ca-certificates.crt; \
    else \
      cp /etc/ssl/certs/ca-certificates.crt /out/ca-certificates.crt; \
    fi
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY config ./config
# Declared targets: cargo reads the whole manifest even to build only the binary.
COPY benches ./benches
COPY tests ./tests
COPY examples/load_resume.rs ./examples/
# Symbols are of no use in the image and are a quarter of the binary.
ENV CARGO_PROFILE_RELEASE_STRIP=symbols
# The cache mounts keep the crate downloads and the compiled dependencies between builds, so a
# change to the service's own code rebuilds only the service. They are not part of any layer,
# hence the copy of the binary out of the target directory in the same step.
RUN --mount=type=cache,id=agui-host-cargo-registry,target=/usr/local/cargo/registry \
    --mount=type=cache,id=agui-host-target,target=/src/target \
    cargo build --release --locked \
 && cp target/release/agui-host /usr/local/bin/agui-host

# ---- runtime -----------------------------------------------------------------------------------
FROM ${RUNTIME_IMAGE}
# The commit and build time are the builder's to give (`--build-arg REVISION=$(git rev-parse HEAD)
# --build-arg CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)`); they stay empty otherwise, so a rebuild
# of the same sources makes the same image. The version is the crate's (tests/release.rs keeps
# the two equal).
ARG REVISION=""
ARG CREATED=""
LABEL org.opencontainers.image.title="agui-host" \
      org.opencontainers.image.description="An AG-UI protocol host for LLM agents: streams OpenAI-compatible models to CopilotKit and any AG-UI client" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="MIT OR Apache-2.0" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
RUN useradd --system --user-group --uid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin agui
# CA certificates for TLS to the model server, as the bundle file alone: TLS is rustls, so the
# ca-certificates package would only add OpenSSL (9 MB) for its maintainer scripts. To trust
# another CA, mount a bundle over this file or point SSL_CERT_FILE at one.
COPY --from=builder /out/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
WORKDIR /app
COPY config ./config
COPY --from=builder /usr/local/bin/agui-host /usr/local/bin/agui-host

# Listen on every interface of the container; JSON log lines for the log collector.
ENV HOST=0.0.0.0 \
    PORT=8080 \
    APP_TELEMETRY__JSON=true \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
USER agui:agui
EXPOSE 8080
# `agui-host healthcheck` GETs /health on $PORT: no curl needed in the image.
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
    CMD ["agui-host", "healthcheck"]
# SIGTERM starts the graceful shutdown (server.shutdown_grace_secs, 8 s by default): give the
# container at least that long to stop (docker stop -t, compose stop_grace_period, Kubernetes
# terminationGracePeriodSeconds).
STOPSIGNAL SIGTERM
ENTRYPOINT ["agui-host"]
