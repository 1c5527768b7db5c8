# For machines with a container daemon. Without one, scripts/build-image.sh
# builds the same image (docs/image.md): the binary as entrypoint, user
# 65532:65532, the example config in /etc/clusterset-dns, the same
# org.opencontainers.image.* labels. Pass the facts the build cannot see:
#
#   docker build \
#     --build-arg VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1) \
#     --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg CREATED=$(date -u -d @$(git log -1 --format=%ct) +%Y-%m-%dT%H:%M:%SZ) \
#     --build-arg SOURCE=<repository URL> -t clusterset-dns:<version> .
FROM rust:1.95-bookworm AS build
# No .git in the build context: build.rs takes the commit from here.
ARG REVISION=unknown
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY src ./src
COPY config ./config
RUN CLUSTERSET_DNS_GIT_COMMIT=$REVISION cargo build --release --locked \
    && strip target/release/clusterset-dns

# glibc and libgcc_s, the binary's only runtime libraries; no shell.
FROM gcr.io/distroless/cc-debian12:nonroot
ARG VERSION=unknown
ARG REVISION=unknown
ARG CREATED=unknown
ARG SOURCE=unknown
LABEL org.opencontainers.image.title="clusterset-dns" \
      org.opencontainers.image.description="Authoritative DNS server and controller for the Kubernetes Multi-Cluster Services API (clusterset.local)" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION" \
      org.opencontainers.image.created="$CREATED" \
      org.opencontainers.image.source="$SOURCE"
COPY --from=build /src/target/release/clusterset-dns /usr/local/bin/clusterset-dns
COPY config/clusterset-dns.toml config/example-clusterset.yaml /etc/clusterset-dns/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/clusterset-dns"]
CMD ["serve"]
