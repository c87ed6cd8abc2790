# tracedb's container image: `docker build -t tracedb .` in the repository.
# A build stage compiles the server; the runtime stage is Debian slim with
# CA certificates (for an object store over TLS), a non-root user and the
# binary. The tests build the same runtime stage from local parts
# (deploy/image/build, no base image pulled) and run it.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin tracedb --config 'profile.release.debug=false'

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 tracedb \
 && useradd --system --uid 10001 --gid tracedb --home-dir /var/lib/tracedb --shell /usr/sbin/nologin tracedb \
 && install -d -o 10001 -g 10001 /var/lib/tracedb
COPY --from=build /src/target/release/tracedb /usr/local/bin/tracedb
USER 10001:10001
# Listen on every interface inside the container; data on the volume.
ENV TRACEDB_DATA_DIR=/var/lib/tracedb \
    TRACEDB_GRPC_ADDR=0.0.0.0:4317 \
    TRACEDB_HTTP_ADDR=0.0.0.0:4318
VOLUME ["/var/lib/tracedb"]
EXPOSE 4317 4318
# SIGTERM flushes every buffer to files before the process exits.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/tracedb", "serve"]
