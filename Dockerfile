# syntax=docker/dockerfile:1
# PyTPU in a container, for a TPU VM (or any Linux x86_64 host: PJRT_DEVICE=CPU runs torch_xla on
# the CPU). Build and run from the repository root:
#
#   docker build -t pytpu .
#   docker run --rm --privileged --net=host -v "$PWD:/workspace" pytpu migrate /workspace
#
# --privileged (or --device for each /dev/accel* / /dev/vfio device) lets the container reach the
# TPU chips. PyTPU writes its branch into the mounted repository as uid 1000; add
# --user "$(id -u):$(id -g)" if the repository belongs to another user. The GitHub Action (action.yml) does not use this image: it installs the same
# packages on the self-hosted runner itself.

# Python 3.11, the version torch_xla 2.9 ships wheels for. Pinned to the patch release; to pin
# the exact image too, append the digest that `docker buildx imagetools inspect` prints.
FROM python:3.11.16-slim-bookworm

LABEL org.opencontainers.image.title="PyTPU" \
      org.opencontainers.image.description="Migrates PyTorch programs to TPUs (torch_xla 2.9)" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PJRT_DEVICE=TPU

# git: PyTPU works on git repositories (worktrees, the pytpu/migrate branch, the bot's clone).
# The user pytpu (uid 1000) runs PyTPU, never root. The repository is mounted from the host and
# owned by another user, so git is told to trust it.
# DL3008 (pin apt versions) is ignored on purpose: Debian's archive keeps only the current build
# of a package, so an exact pin breaks the build after the next security update; git follows the
# base image's Debian release instead.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/* \
    && git config --system --add safe.directory '*' \
    && useradd --create-home --uid 1000 --user-group --shell /bin/bash pytpu

# torch_xla's wheel does not declare torch: the two must be this exact pair, pinned here in their
# own layer (several GB) so that a change to PyTPU does not download them again. The tpu extra
# brings libtpu, the TPU runtime.
RUN pip install --no-cache-dir "torch==2.9.0" "torch_xla[tpu]==2.9.0"

# PyTPU itself (pyproject.toml pins the same torch pair, already satisfied above) and its test
# runtime, pytpu-runtime from engine/runtime: PyTPU pins it, and the behaviour tests it generates
# import it. One pip call, so that the pin is met by the copy here, not looked up on an index.
COPY . /usr/src/pytpu
RUN pip install --no-cache-dir /usr/src/pytpu/engine/runtime /usr/src/pytpu

# Run as the ordinary user pytpu (by number, so that Kubernetes' runAsNonRoot can check it), in
# the folder where the repository is mounted.
USER 1000:1000
WORKDIR /workspace

ENTRYPOINT ["pytpu"]
CMD ["--help"]
