# The Ridgeline service. Build: docker build -t ridgeline .   Run: see docker-compose.yml.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY roofline ./roofline
COPY schemas ./schemas
COPY adapters ./adapters
COPY hardware_db ./hardware_db
COPY measured ./measured
COPY service ./service
COPY migrations ./migrations
COPY worker ./worker
RUN pip install . && useradd --create-home --uid 10001 ridgeline && mkdir /data && chown ridgeline /data

USER ridgeline
WORKDIR /data
EXPOSE 8000
# Without DATABASE_URL the service uses SQLite in /data. `serve` migrates and loads the catalogue first.
CMD ["ridgeline", "serve", "--host", "0.0.0.0", "--port", "8000"]
