"""The accounts of the ACL tests' broker and the transport configs that sign as them."""

from __future__ import annotations

from rmq_spark import Credentials, TransportConfig

ACL_FILE = """\
accounts:
  - accessKey: writer
    secretKey: writer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [orders=PUB, audit=PUB]
  - accessKey: writer2
    secretKey: writer2-secret
    topicPerms: [orders=PUB]
  - accessKey: reader
    secretKey: reader-secret
    topicPerms: [orders=SUB, audit=DENY]
    groupPerms: [billing=SUB, rocketmq-batch-reader=SUB]
  - accessKey: ops
    secretKey: ops-secret
    admin: true
  - accessKey: stranger
    secretKey: stranger-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
  - accessKey: etl
    secretKey: etl-secret
    defaultTopicPerm: DENY
    sinkPerms: [orders-etl=PUB|SUB]
"""
SECRETS = {"writer": "writer-secret", "writer2": "writer2-secret", "reader": "reader-secret", "ops": "ops-secret",
           "stranger": "stranger-secret", "etl": "etl-secret"}  # stranger: an account granted nothing


def config(access_key: str, secret_key: str | None = None) -> TransportConfig:
    """The transport config of an account (its secret from the file, unless given)."""
    return TransportConfig(credentials=Credentials(access_key, secret_key or SECRETS[access_key]), retries=0)
