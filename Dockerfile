# Images of the processes of docker-compose.yml. Two targets:
#   app      `cdc agent` and `cdc worker`, without Spark (`pip install .`); the compose file builds this one.
#   pipeline `cdc pipeline ...`, with the pipeline extra (`.[pipeline]`: pyspark, delta-spark) and a JRE.
#            Build it with `docker build --target pipeline .`; the Spark jobs also need the Kafka connector
#            and Delta jars (`cdc infra fetch`, infra/maven/spark) in the cache.
FROM python:3.11-slim-bookworm AS source
WORKDIR /opt/cassandra-cdc
COPY pyproject.toml README.md ./
COPY cdc cdc
COPY agents agents
COPY app app
COPY consumers consumers
COPY pipeline pipeline
COPY schemas schemas
COPY state state
COPY cassandra_model cassandra_model
COPY runtime runtime
COPY infra infra

FROM source AS pipeline
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir '.[pipeline]'
ENTRYPOINT []

# Last, so that a plain `docker build .` gives the agent and worker image.
FROM source AS app
RUN pip install --no-cache-dir .
ENTRYPOINT []
