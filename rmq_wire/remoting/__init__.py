"""RocketMQ's remoting protocol: frames, commands and codes, shared by broker_sim's remoting
door and the SDK's remoting transport. Imports nothing of either product."""

from rmq_wire.remoting.client import RemotingConnection
from rmq_wire.remoting.codes import LANGUAGES, RequestCode, ResponseCode, SerializeType
from rmq_wire.remoting.command import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    HTTP2_PREFACE,
    MAX_FRAME_BYTES,
    FrameError,
    FrameReader,
    HeaderError,
    RemotingCommand,
    WrongProtocolError,
    decode,
    encode,
    http2_peer,
)

__all__ = ["FLAG_ONEWAY", "FLAG_RESPONSE", "HTTP2_PREFACE", "LANGUAGES", "MAX_FRAME_BYTES", "FrameError", "FrameReader",
           "HeaderError", "RemotingCommand", "RemotingConnection", "RequestCode", "ResponseCode", "SerializeType",
           "WrongProtocolError", "decode", "encode", "http2_peer"]
