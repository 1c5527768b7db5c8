# Multi-stage build: a static-enough binary on a distroless, non-root base.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY config ./config
RUN cargo build --release --locked && strip target/release/clusterset-dns

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/clusterset-dns /usr/local/bin/clusterset-dns
USER nonroot
ENTRYPOINT ["/usr/local/bin/clusterset-dns"]
CMD ["serve"]
