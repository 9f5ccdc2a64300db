"""The tag filter module: RocketMQ's tagsCode (Java String.hashCode) and SubscriptionData rules."""

import pytest

from broker_sim.store.message_filter import TagFilter, tags_code
from rmq_wire import record as fmt


@pytest.mark.parametrize("tag, java_hash", [
    ("TagA", 2598919), ("TagB", 2598920), ("a", 97), ("hello", 99162322),
    ("Hello, World!", 1498789909), ("标签", 857175), ("é", 233), ("😀", 1772899),
])
def test_tags_code_is_java_string_hash(tag, java_hash):
    assert tags_code(tag.encode()) == java_hash


def test_tags_code_wraps_to_a_signed_java_int_and_is_zero_without_tags():
    assert tags_code(b"polygenelubricants") == -2147483648
    assert tags_code(None) == tags_code(b"") == 0


@pytest.mark.parametrize("expression", ["", "   ", "*", " * "])
def test_empty_and_star_match_everything(expression):
    assert TagFilter.parse(expression) is None


@pytest.mark.parametrize("expression", ["TagA||TagB", " TagA || TagB ", "TagA ||  || TagB", "|| TagA || TagB ||"])
def test_tags_are_trimmed_and_empty_ones_dropped(expression):
    tag_filter = TagFilter.parse(expression)
    assert tag_filter.tags == {b"TagA", b"TagB"}
    assert tag_filter.codes == {tags_code(b"TagA"), tags_code(b"TagB")}


@pytest.mark.parametrize("expression", ["||", " || || "])
def test_an_expression_naming_no_tag_is_refused(expression):
    with pytest.raises(ValueError, match="names no tag"):
        TagFilter.parse(expression)


def test_message_id_is_offset_msg_id():
    host = bytes([127, 0, 0, 1]) + (8081).to_bytes(4, "big")
    assert fmt.message_id(host, 0x1234) == "7F00000100001F910000000000001234"
