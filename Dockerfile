# Horae's two images, from one base; build from the repository root:
#   docker build --target horae  -t horae:dev .         operator, API, scheduler, migrations
#   docker build --target worker -t horae-worker:dev .  a worker running worker/examples
# Every package installed is pinned and checked against its sha256 from the locks
# (`make lock` regenerates them): the build tools from requirements-build.lock, the runtime
# dependencies from requirements-runtime.lock; horae itself adds none (--no-deps).
ARG PYTHON=python:3.11.7-slim-bookworm

# horae's wheel, built with the locked build tools only (no build isolation: nothing
# unpinned is fetched).
FROM ${PYTHON} AS build
WORKDIR /src
COPY requirements-build.lock ./
RUN pip install --no-cache-dir --require-hashes --no-deps -r requirements-build.lock
COPY pyproject.toml README.md ./
COPY horae ./horae
RUN pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels .

# What both images share: the runtime dependencies (a layer that a change to horae's code
# alone leaves cached), then horae; `pip check` fails the build if the lock missed one.
FROM ${PYTHON} AS runtime
RUN useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin horae
COPY requirements-runtime.lock /opt/horae/
RUN pip install --no-cache-dir --require-hashes --no-deps -r /opt/horae/requirements-runtime.lock
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-deps /wheels/*.whl && rm -rf /wheels && pip check
ENV PYTHONUNBUFFERED=1

# A worker image: Horae plus the task modules it runs (here worker/examples). Application
# teams build theirs FROM the Horae image with their own modules: a WorkerPool's pods run
# `horae worker --tasks MODULE` whatever the image's entrypoint.
FROM runtime AS worker
COPY worker/examples /app/examples
WORKDIR /app
ENV PYTHONPATH=/app
USER 10001
ENTRYPOINT ["horae", "worker"]
CMD ["--tasks", "examples.demo"]

# The Horae image (the default target): one package, one image for every component.
FROM runtime AS horae
USER 10001
ENTRYPOINT ["horae"]
CMD ["operator"]
