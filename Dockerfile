# One image for every service of docker-compose.yml: the workers, beat, Flower, the one-shot
# migration and the demo agent. They differ only by command.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml requirements.lock README.md ./
COPY config ./config
COPY pipelines ./pipelines
COPY workers ./workers
COPY schedules ./schedules
COPY memharness ./memharness
# A regular (not editable) install, constrained by the lock CI tested: the image runs the
# versions the tests ran. psycopg[binary] and numpy come as wheels, so slim needs no compiler.
RUN pip install -c requirements.lock . \
    && rm -rf /src/build /src/*.egg-info

# Not root. Beat keeps its schedule file in the working directory, so that must be writable.
RUN useradd --system --create-home --home-dir /home/memharness memharness \
    && mkdir -p /var/lib/memharness \
    && chown memharness /var/lib/memharness
USER memharness
WORKDIR /var/lib/memharness

CMD ["memharness", "--help"]
