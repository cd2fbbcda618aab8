# ringgate: a static binary in an image with nothing else, run as a
# non-root user. Build: docker build -t ringgate .
# Run:   docker run -v $PWD/config.toml:/etc/ringgate/config.toml \
#          -e RINGGATE_SECRET=$(openssl rand -base64 32) -p 8080:8080 ringgate
# The flags of the static build are the Makefile's (make static), which CI
# checks without Docker (deploy/deploy_test.go).

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN make static OUT=/out/ringgate

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/
COPY --from=build /out/ringgate /ringgate
# A user with no name and no home: nothing in the image needs one.
USER 65532:65532
EXPOSE 8080 7946/tcp 7946/udp
ENV RINGGATE_LISTEN=0.0.0.0:8080 RINGGATE_GOSSIP=0.0.0.0:7946
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 CMD ["/ringgate", "healthcheck"]
ENTRYPOINT ["/ringgate", "-config", "/etc/ringgate/config.toml"]
