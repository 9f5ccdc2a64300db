# One image for the broker and the Spark jobs: Python 3.11, Java 17 (PySpark 4.x needs 17+),
# and this project installed with pip.
FROM python:3.11-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md rocketmq_batch_spark.pth ./
COPY broker_sim broker_sim
COPY rmq_spark rmq_spark
COPY rmq_wire rmq_wire
COPY pyspark_rocketmq_batch.py ./
COPY examples examples
# The broker and PySpark are the package's extras: this image runs both.
RUN pip install --no-cache-dir '.[spark,broker]'

# PySpark's Python workers must run the driver's interpreter.
ENV PYSPARK_PYTHON=/usr/local/bin/python PYTHONUNBUFFERED=1
EXPOSE 10911
# TLS: mount PEM files (never bake keys into the image) and add --tls-cert FILE --tls-key FILE
# [--tls-client-ca FILE] to the command; docker-compose.yml shows where.
CMD ["rmq-broker-sim", "--data-dir", "/data", "--host", "0.0.0.0", "--port", "10911"]
