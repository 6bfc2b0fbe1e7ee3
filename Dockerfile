# Image for the agent and worker processes (`cdc agent`, `cdc worker`); see docker-compose.yml.
FROM python:3.11-slim
WORKDIR /opt/cassandra-cdc
COPY pyproject.toml README.md ./
COPY agents agents
COPY app app
COPY state state
COPY schemas schemas
COPY pipeline pipeline
COPY cdc cdc
COPY infra infra
RUN pip install --no-cache-dir .
ENTRYPOINT []
