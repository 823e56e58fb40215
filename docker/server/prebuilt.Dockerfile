# The codeexec server image from a binary built beforehand, for a host that
# reaches no registry (Dockerfile needs the golang and distroless images):
# one static binary and nothing else. The e2e test of the kubernetes
# Deployment (e2e/kube_test.go) builds it so:
#
#   CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o DIR/codeexec ./cmd/codeexec
#   DOCKER_BUILDKIT=0 docker build -f docker/server/prebuilt.Dockerfile -t codeexec:latest DIR
#
# It runs no code itself: use it with CODE_EXEC_SANDBOX=docker (see
# docker/compose.yaml) or kubernetes (see deploy/kubernetes/), which the
# environment sets.
FROM scratch
COPY codeexec /usr/local/bin/codeexec
USER 65532:65532
ENV CODE_EXEC_TRANSPORT=http \
    CODE_EXEC_ADDR=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/codeexec"]
