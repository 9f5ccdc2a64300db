"""Whatever the SDK raises to a user is in the rmq_spark.errors tree, and exported."""

import inspect

import pytest

import rmq_spark
from rmq_spark import errors
from rmq_spark.producer.batch import BatchKey, ProducerBatch
from rmq_spark.structs import Message
from rmq_wire.codec import Codec, decode_batch, encode_messages
from rmq_wire.codec.columns import to_batch_columns


def _error_classes():
    return [cls for name, cls in vars(errors).items()
            if inspect.isclass(cls) and issubclass(cls, errors.RmqError) and not name.startswith("_")]


def test_every_error_class_is_exported_and_documented():
    for cls in _error_classes():
        assert getattr(rmq_spark, cls.__name__) is cls, f"{cls.__name__} is not exported from rmq_spark"
        assert cls.__name__ in rmq_spark.__all__
        assert (cls.__doc__ or "").strip(), f"{cls.__name__} has no docstring"


def test_bad_columns_raise_a_codec_error():
    with pytest.raises(errors.CodecError, match="pyarrow Table"):
        to_batch_columns({"x": [1]})


def test_bad_codec_name_raises_a_codec_error():
    with pytest.raises(errors.CodecError, match="unknown codec"):
        Codec.parse("zip")


def test_a_damaged_payload_raises_a_codec_error_that_is_still_a_value_error():
    payload = encode_messages([(b"hello", {}, None, None, 1)], "rmq", "none")
    with pytest.raises(errors.CodecError) as caught:
        decode_batch(payload[:-3], "rmq", "none", 1)
    assert isinstance(caught.value, ValueError)


def test_a_future_without_answer_raises_a_retriable_timeout():
    batch = ProducerBatch(BatchKey("t", 0, None))
    future = batch.append(Message(topic="t", body=b"x"))
    with pytest.raises(errors.RequestTimeoutError) as caught:
        future.result(timeout=0.01)
    assert isinstance(caught.value, TimeoutError) and caught.value.retriable
    with pytest.raises(errors.ResultTimeoutError):
        future.exception(timeout=0)
