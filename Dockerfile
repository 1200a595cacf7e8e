# The randflake command as a container image: the static linux binary of a
# release (or one built the same way) on an empty base, run as a non-root
# user. There is no build stage: the binary comes from the build context,
# a directory holding `randflake` and `LICENSE`, such as an unpacked
# release archive (randflake_VERSION_linux_amd64/) or what
# .ci/image-check.sh prepares. docs/container.md has the steps.
#
#   podman build --build-arg VERSION=v0.2.0 -t randflake:v0.2.0 -f Dockerfile randflake_v0.2.0_linux_amd64/
FROM scratch

ARG VERSION=unknown
ARG REVISION=unknown

LABEL org.opencontainers.image.title="randflake" \
      org.opencontainers.image.description="Unpredictable unique 64-bit IDs over HTTP (randflake serve)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/randflake/randflake" \
      org.opencontainers.image.url="https://github.com/randflake/randflake" \
      org.opencontainers.image.documentation="https://github.com/randflake/randflake/blob/main/docs/container.md" \
      org.opencontainers.image.licenses="MIT"

# Owned by root and not writable by the user the process runs as.
COPY randflake /randflake
COPY LICENSE /LICENSE

# A numeric user and group, so that runAsNonRoot can check it without an
# /etc/passwd (there is none).
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/randflake"]
CMD ["serve", "--listen", ":8080"]
