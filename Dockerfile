# A static portcullis binary on a distroless base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/portcullis ./cmd/portcullis

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/portcullis /usr/local/bin/portcullis
USER nonroot
EXPOSE 7070
ENTRYPOINT ["/usr/local/bin/portcullis"]
CMD ["gateway", "--listen", "0.0.0.0:7070", "--insecure"]
