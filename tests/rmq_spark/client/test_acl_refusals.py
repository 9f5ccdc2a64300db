"""A real RocketMQ's ACL refusals become our sentence (rmq_spark/client/remoting/acl_refusals.py): the remarks
RocketMQ 5's ACL 2.0 answers with NO_PERMISSION (checked against the broker itself in
tests/peers/test_rocketmq_acl.py) and the Java text RocketMQ 4's ACL 1.0 answers with SYSTEM_ERROR
(its AclException's messages, as PlainPermissionManager writes them); other remarks are left alone."""

from __future__ import annotations

import pytest

from rmq_spark.client.remoting.acl_refusals import acl_refusal
from rmq_spark.errors import AuthenticationError, PermissionDeniedError

WHAT = "broker broker-a refused a send to topic 'orders'"
V4 = "org.apache.rocketmq.acl.common.AclException: {}, org.apache.rocketmq.acl.plain.PlainPermissionManager." \
     "validate(PlainPermissionManager.java:667)"


@pytest.mark.parametrize("remark, cls, says", [
    ("username cannot be null.", AuthenticationError, "the request was not signed: give the account's accessKey"),
    ("User:bob is not found.", AuthenticationError, "access key 'bob' is not an account of the broker"),
    ("check signature failed.", AuthenticationError, "does not match the secret key the broker holds for the access "
                                                     "key given: check secretKey"),
    ("User:alice is disabled.", AuthenticationError, "account 'alice' is disabled"),
    ("User:alice has no permission to access Topic:audit from 127.0.0.1, no matched policies.",
     PermissionDeniedError, "the account 'alice' may not use topic 'audit': ask the broker's admin to grant it"),
    ("User:alice has no permission to access Group:readers from 127.0.0.1, no matched policies.",
     PermissionDeniedError, "the account 'alice' may not use group 'readers'"),
    (V4.format("No accessKey is configured"), AuthenticationError, "the request was not signed"),
    (V4.format("No acl config for bob"), AuthenticationError, "access key 'bob' is not an account of the broker"),
    (V4.format("Check signature failed for accessKey=alice"), AuthenticationError,
     "the secret key the broker holds for access key 'alice': check secretKey"),
    (V4.format("No default permission for topic:audit"), PermissionDeniedError,
     "the account may not use topic 'audit'"),
    (V4.format("No default permission for group:readers"), PermissionDeniedError,
     "the account may not use group 'readers'"),
    (V4.format("Need admin permission for request code=17, but accessKey=alice is not"), PermissionDeniedError,
     "account 'alice' is not an admin of the broker"),
])
def test_rocketmqs_refusals_become_one_sentence_of_ours(remark, cls, says):
    error = acl_refusal(remark, WHAT)
    assert type(error) is cls and str(error).startswith(WHAT + ": ") and says in str(error)
    assert "org.apache" not in str(error) and "\n" not in str(error)
    assert error.reason == remark  # the broker's own words stay on the error


@pytest.mark.parametrize("remark", [None, "", "account 'writer' may not publish to topic 'orders'",
                                    "java.lang.NullPointerException, org.apache.rocketmq.X.y(X.java:1)"])
def test_other_remarks_are_not_taken_for_acl_refusals(remark):
    assert acl_refusal(remark, WHAT) is None
