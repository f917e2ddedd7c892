# A static portcullis binary on a distroless base, running as nonroot.
#
#   docker build --build-arg VERSION=$(git describe --always --dirty) \
#     --build-arg REVISION=$(git rev-parse HEAD) -t portcullis .
#
# The build args fill the images' OCI labels (docker inspect): VERSION,
# REVISION, SOURCE and LICENSES (an SPDX expression; NOASSERTION until the
# repository carries a license). .dockerignore keeps a developer's data
# dirs, tokens and .git out of the build context.
ARG VERSION=dev
ARG REVISION=unknown
ARG SOURCE=https://github.com/portcullis-dev/portcullis
ARG LICENSES=NOASSERTION

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
ARG VERSION
ARG REVISION
ARG SOURCE
ARG LICENSES
LABEL org.opencontainers.image.title="portcullis-proxy" \
      org.opencontainers.image.description="Portcullis proxy: enforces a sandbox's signed policy at its egress" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="${LICENSES}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
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
ARG VERSION
ARG REVISION
ARG SOURCE
ARG LICENSES
LABEL org.opencontainers.image.title="portcullis-tools" \
      org.opencontainers.image.description="The portcullis CLI beside a busybox shell, for one-shot steps" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="${LICENSES}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
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
ARG VERSION
ARG REVISION
ARG SOURCE
ARG LICENSES
LABEL org.opencontainers.image.title="portcullis-netinit" \
      org.opencontainers.image.description="nftables and portcullis: installs a sandbox's redirect to its proxy" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="${LICENSES}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
RUN apt-get update && apt-get install -y --no-install-recommends nftables && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/portcullis /usr/local/bin/portcullis
ENTRYPOINT ["/bin/sh", "-c"]

# The gateway's image (the default target).
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION
ARG REVISION
ARG SOURCE
ARG LICENSES
LABEL org.opencontainers.image.title="portcullis" \
      org.opencontainers.image.description="Portcullis gateway: versioned sandbox policies, proposals, approvals and audit" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="${LICENSES}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/portcullis /usr/local/bin/portcullis
COPY --from=build --chown=65532:65532 --chmod=700 /out/data /data
COPY --from=build --chown=65532:65532 --chmod=700 /out/secrets /secrets
USER nonroot
# The embedded SQLite store (used without PORTCULLIS_DATABASE_URL) and the
# signing keys live in the default --data-dir, ./portcullis-data, relative
# to the working directory: /data/portcullis-data, on the volume whatever
# command the container runs (gateway, signing-key list, migrate).
# docker run -v portcullis-data:/data … keeps them across containers.
WORKDIR /data
VOLUME ["/data"]
EXPOSE 7070
ENTRYPOINT ["/usr/local/bin/portcullis"]
# Plaintext on 0.0.0.0 is refused: give --tls-cert/--tls-key, or pass
# --insecure deliberately when a private network carries the traffic (the
# compose file does, publishing the port on the host's loopback only).
CMD ["gateway", "--listen", "0.0.0.0:7070"]
