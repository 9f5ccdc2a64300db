"""rocketmq-batch-spark: a RocketMQ-style batch broker simulator and its PySpark connector."""

from setuptools import find_packages, setup

setup(
    name="rocketmq-batch-spark",
    version="0.1.0",
    description=(
        "RocketMQ's batch storage model as a local gRPC broker (broker_sim) and a client SDK "
        "with the PySpark data source 'rocketmq-batch' (rmq_spark)."
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["rmq_spark", "rmq_spark.*", "broker_sim", "broker_sim.*"]),
    # PySpark registers the DefaultSource of top-level pyspark_* modules: the format rocketmq-batch.
    py_modules=["pyspark_rocketmq_batch"],
    install_requires=[
        # 4.2+ has the Python streaming source API with read limits; 4.3 is what we test.
        "pyspark>=4.3.0,<4.4",
        "pyarrow>=18.0.0,<27",
        "pandas>=2.2.0,<3",  # PySpark 4.3's supported range
        "numpy>=1.23.2,<3",
        "grpcio>=1.76.0,<2",
        "protobuf>=6.31.1,<8",
        "rocksdict>=0.3.24,<0.4",
        "zstandard>=0.25.0,<1",
        "lz4>=4.3.3,<5",
        "orjson>=3.10,<4",  # remoting headers and bodies are JSON: ~5x faster than json here
        "isal>=1.7,<2",  # CRC-32 of every stored body with SIMD: ~12x zlib's (broker_sim.store.format)
        "pyyaml>=6.0,<7",  # the broker's ACL file: RocketMQ's plain_acl.yml
    ],
    extras_require={
        # grpcio-tools is pinned: the generated code must not change under the regeneration test.
        # ruff is pinned to a minor version: its rules change between minors.
        # kafka-python: the Kafka peer's admin calls and a Python producer beside ours (peers/).
        # hypothesis: the fuzz tests of every decoder a peer can reach (tests/fuzz, `make fuzz`).
        # rocketmq: Apache's C++ client (librocketmq in a manylinux x86-64 wheel), a conformance
        # client of the remoting door; its tests skip where it cannot install.
        # cryptography: the TLS tests make their CA and certificates at run time (none is committed).
        # hypothesis: the bounded fuzzing of tests/fuzz (make fuzz runs it long).
        "test": ["pytest>=8.0,<10", "grpcio-tools==1.76.0", "ruff>=0.17,<0.18",
                 "kafka-python>=2.2,<4", "cryptography>=42,<51", "hypothesis>=6.100,<7",
                 "rocketmq>=0.4.4,<0.5; platform_system == 'Linux' and platform_machine == 'x86_64'"],
        # The peer benchmark's Python clients: Kafka's librdkafka one, and RocketMQ 5's official one (gRPC).
        # RocketMQ's official Python client is not here: it shares the package name `rocketmq` with
        # the C++ client of the test extra; peers/python_client.py gives it a venv of its own.
        "bench": ["matplotlib>=3.8,<4", "confluent-kafka>=2.6,<3"],
    },
    entry_points={"console_scripts": [
        "rmq-broker-sim = broker_sim.server.cli:main",
        "rmq-admin = rmq_spark.cli:main",
    ]},
)
