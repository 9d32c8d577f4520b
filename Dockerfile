# Boundary images. The server target runs the reader and the job queue (with one local
# CPU worker); the worker targets attach a GPU or TPU host to a server.
#
#   docker build --target server -t boundary .
#   docker build --target worker-cuda -t boundary-worker-cuda .
#   docker build --target worker-tpu -t boundary-worker-tpu .

FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /srv/boundary
COPY pyproject.toml README.md ./
COPY app ./app
COPY workers ./workers
COPY kernels ./kernels
COPY templates ./templates
COPY static ./static

FROM base AS server
RUN python -m venv .venv && .venv/bin/pip install -e '.[server]'
ENV BOUNDARY_DB=/data/boundary.sqlite3
VOLUME /data
EXPOSE 8000
CMD [".venv/bin/boundary", "serve", "--host", "0.0.0.0", "--port", "8000"]

# An NVIDIA GPU host: JAX with its CUDA plugin. Run with --gpus all and point it at a server:
#   docker run --gpus all -e BOUNDARY_WORKER_TOKEN=... boundary-worker-cuda --server https://...
FROM base AS worker-cuda
RUN python -m venv .venv && .venv/bin/pip install -e '.[cuda]'
ENTRYPOINT [".venv/bin/boundary", "worker"]

# A Cloud TPU VM: JAX with its TPU extra. Run with --privileged --net=host on the TPU VM.
FROM base AS worker-tpu
RUN python -m venv .venv && .venv/bin/pip install -e '.[tpu]'
ENTRYPOINT [".venv/bin/boundary", "worker"]
