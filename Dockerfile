# syntax=docker/dockerfile:1
# PyTPU in a container, for a TPU VM (or any Linux x86_64 host: PJRT_DEVICE=CPU runs torch_xla on
# the CPU). Two images from this file, built from the repository root:
#
#   docker build -t pytpu .                          # PyTPU itself: the last stage, the default
#   docker run --rm --privileged --net=host -v "$PWD:/workspace" pytpu migrate /workspace
#
#   docker build --target runner -t REGISTRY/pytpu-runner:0.1.0 .
#
# The first is PyTPU's command line. --privileged (or --device for each /dev/accel* / /dev/vfio
# device) lets the container reach the TPU chips. PyTPU writes its branch into the mounted
# repository as uid 1000; add --user "$(id -u):$(id -g)" if the repository belongs to another
# user. The GitHub Action (action.yml) does not use this image on a runner of your own: it installs
# the same packages on the self-hosted runner itself.
#
# The second, the stage `runner`, is the same PyTPU with the GitHub Actions runner added: the
# runner image for Actions Runner Controller's runner scale sets on a Kubernetes TPU node pool
# (docs/deploy.md, examples/arc/values.yaml). BuildKit, Docker's default builder, builds only the
# stages the chosen target needs, so the default build never fetches the runner.

# Python 3.11, the version torch_xla 2.9 ships wheels for. Pinned to the patch release; to pin
# the exact image too, append the digest that `docker buildx imagetools inspect` prints.
# `base` holds everything both images share; the last two stages only add their user and command.
FROM python:3.11.16-slim-bookworm AS base

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

# PyTPU itself (its programs' environments are layered over this one's torch pair) and its test
# runtime, pytpu-runtime from engine/runtime: PyTPU pins it, and the behaviour tests it generates
# import it. One pip call, so that the pin is met by the copy here, not looked up on an index.
COPY . /usr/src/pytpu
RUN pip install --no-cache-dir /usr/src/pytpu/engine/runtime /usr/src/pytpu


# -- runner: PyTPU plus the GitHub Actions runner, for ARC (docker build --target runner) --------
# What ARC expects of a runner image (actions-runner-controller, docs/adrs/2022-10-17-runner-
# image.md, and GitHub's own image, actions/runner images/Dockerfile): the runner in /home/runner,
# started as /home/runner/run.sh, its work folder /home/runner/_work, run by the user runner, uid
# 1001, which examples/arc/values.yaml's runAsUser names.
FROM base AS runner

LABEL org.opencontainers.image.title="PyTPU runner" \
      org.opencontainers.image.description="PyTPU and the GitHub Actions runner, for ARC on TPUs"

# The runner is a .NET program: these are the libraries its bin/installdependencies.sh (runner
# 2.336.0) installs on Debian 12 and the Python image lacks, or may drop (libssl3, zlib1g).
# DL3008: as above, the packages follow the base image's Debian release.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libicu72 libkrb5-3 liblttng-ust1 libssl3 zlib1g \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1001 --user-group --shell /bin/bash runner

# The runner's files (bin/, externals/, run.sh, ...) from GitHub's runner image, the release tag
# pinned (ARC's own default is :latest); moving it is one line. GitHub stops sending jobs to a
# runner release that is too old, so follow the runner's releases.
COPY --from=ghcr.io/actions/actions-runner:2.336.0 --chown=1001:1001 /home/runner /home/runner

# As in GitHub's runner image: run.sh passes a SIGTERM (the pod being stopped) on to the runner,
# and the runner's own log goes to the pod's log.
ENV RUNNER_MANUALLY_TRAP_SIG=1 \
    ACTIONS_RUNNER_PRINT_LOG_TO_STDOUT=1

USER 1001:1001
WORKDIR /home/runner
CMD ["/home/runner/run.sh"]


# -- the default image: PyTPU's command line (docker build -t pytpu .) ----------------------------
FROM base AS pytpu

# Run as the ordinary user pytpu (by number, so that Kubernetes' runAsNonRoot can check it), in
# the folder where the repository is mounted.
USER 1000:1000
WORKDIR /workspace

ENTRYPOINT ["pytpu"]
CMD ["--help"]
