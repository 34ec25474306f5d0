# nodeshepherd's container image: a static binary on distroless, as a
# non-root user. The binary is built by `make build`, the same target the
# tests build the binary they run with (test/framework.Binary).
#   docker build -t nodeshepherd:latest .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=v0.1.0-dev
RUN make build VERSION=$VERSION

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/bin/nodeshepherd /nodeshepherd
USER 65532:65532
ENTRYPOINT ["/nodeshepherd"]
