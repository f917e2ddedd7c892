# A static portcullis binary on a distroless base, running as nonroot.
FROM golang:1.26 AS src
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Mount points owned by the nonroot user (65532): a named volume mounted
# there starts with this owner, so the proxy can write its data dir and the
# provisioning step its token.
RUN mkdir -p /out/data /out/secrets

FROM src AS build
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/portcullis ./cmd/portcullis

# The sidecar's binary: portcullis with the proxy's commands only
# (-tags proxyonly), without the gateway, its stores, OPA and the client
# commands; an idle proxy holds 23 MiB instead of 36 (BENCHMARKS.md).
FROM src AS build-proxy
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -tags proxyonly -o /out/portcullis ./cmd/portcullis

# The proxy image: docker build --target proxy . (docker-compose.yml's
# proxy service). Its data dir, /data, is owned by the nonroot user.
FROM gcr.io/distroless/static-debian12:nonroot AS proxy
COPY --from=build-proxy /out/portcullis /usr/local/bin/portcullis
COPY --from=build-proxy --chown=65532:65532 --chmod=700 /out/data /data
COPY --from=build-proxy --chown=65532:65532 --chmod=700 /out/secrets /secrets
USER nonroot
WORKDIR /home/nonroot
EXPOSE 3128
ENTRYPOINT ["/usr/local/bin/portcullis"]
CMD ["proxy", "--help"]

# The binary beside a busybox shell, for one-shot steps that need one
# (docker-compose.yml's provision service): docker build --target tools .
FROM gcr.io/distroless/static-debian12:debug-nonroot AS tools
COPY --from=build /out/portcullis /usr/local/bin/portcullis
COPY --from=build --chown=65532:65532 --chmod=700 /out/secrets /secrets
USER nonroot
WORKDIR /home/nonroot
ENTRYPOINT ["/busybox/sh", "-c"]

# The redirect's installer, for a one-shot step in the sandbox's network
# namespace (deploy/compose's netinit service, deploy/kubernetes' init
# container): nft and the binary that prints the rules
# (portcullis run --print-rules). It needs CAP_NET_ADMIN, and only it does:
# docker build --target netinit .
FROM debian:trixie-slim AS netinit
RUN apt-get update && apt-get install -y --no-install-recommends nftables && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/portcullis /usr/local/bin/portcullis
ENTRYPOINT ["/bin/sh", "-c"]

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/portcullis /usr/local/bin/portcullis
COPY --from=build --chown=65532:65532 --chmod=700 /out/data /data
COPY --from=build --chown=65532:65532 --chmod=700 /out/secrets /secrets
USER nonroot
# The embedded SQLite store (used without PORTCULLIS_DATABASE_URL) lives in
# ./portcullis-data under the nonroot user's home.
WORKDIR /home/nonroot
EXPOSE 7070
ENTRYPOINT ["/usr/local/bin/portcullis"]
# Plaintext on 0.0.0.0 is refused: give --tls-cert/--tls-key, or pass
# --insecure deliberately when a private network carries the traffic (the
# compose file does, publishing the port on the host's loopback only).
CMD ["gateway", "--listen", "0.0.0.0:7070"]
