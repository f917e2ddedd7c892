# A static portcullis binary on a distroless base, running as nonroot.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/portcullis ./cmd/portcullis

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/portcullis /usr/local/bin/portcullis
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
