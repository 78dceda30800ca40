# Multi-stage: build with the Rust toolchain, run from a small Debian image.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release -p ojs-server

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/ojs-server /usr/local/bin/ojs-server
ENV OJS_LISTEN=0.0.0.0:8080
EXPOSE 8080
HEALTHCHECK --interval=5s --timeout=2s CMD curl -sf http://127.0.0.1:8080/ojs/v1/health || exit 1
ENTRYPOINT ["/usr/local/bin/ojs-server"]
