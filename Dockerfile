# The images `make images` builds without a container engine, for people with Docker:
#
#   docker build -t toolgate/controller:dev .
#   docker build --target runner -t toolgate/runner:dev .
#   docker build --target workspace -t toolgate/workspace:dev .
#
# Every image runs as the numeric user 65532: Executions run with runAsNonRoot, which
# the kubelet can only check for a numeric user.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/manager ./cmd/manager && \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/runner ./cmd/runner

# The runner's image holds only the runner: the Job's init container runs
# `/runner install DEST` to copy it into the pod.
FROM scratch AS runner
COPY --from=build /out/runner /runner
USER 65532:65532
ENTRYPOINT ["/runner"]

# A small image tools run in: a shell and the usual text tools.
FROM busybox:stable-musl AS workspace
RUN mkdir -p /workspace && chown 65532:65532 /workspace
WORKDIR /workspace
USER 65532:65532

# The controller (the default target).
FROM scratch AS controller
COPY --from=build /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
