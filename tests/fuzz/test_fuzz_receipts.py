"""Receipt handles, as a peer sends them back: the pop service's signed handles (opened on
every ack and change of invisible time) and the v2 door's handles of inner batch messages.
A handle this broker did not sign is refused with InvalidReceiptHandle; a changed one never
opens as another."""

from hypothesis import example, given
from hypothesis import strategies as st

from broker_sim.doors.rocketmq_v2 import receipts
from broker_sim.pop import InvalidReceiptHandle
from broker_sim.pop.receipt import ReceiptSigner
from broker_sim.pop.state import PopCheckpoint
from strategies import handle_texts, mutated
from support.budget import examples
from watch import quick

SIGNER = ReceiptSigner(bytes(range(32)))
checkpoints = st.builds(PopCheckpoint, st.booleans(), st.integers(0, 2**62), st.text("gG-_", min_size=1, max_size=8),
                        st.text("tT%_", min_size=1, max_size=8), st.integers(0, 2**31 - 1), st.integers(0, 2**62),
                        st.integers(1, 2**31 - 1), st.integers(0, 16), st.integers(-2**63, 2**63 - 1),
                        st.integers(0, 2**62))


@examples(300)
@given(handle_texts)
def test_a_handle_this_broker_did_not_sign_is_refused(handle):
    with quick():
        try:
            SIGNER.open(handle)
        except InvalidReceiptHandle:
            return
    raise AssertionError(f"{handle!r} opened")


@examples(300)
@given(checkpoints, st.data())
def test_a_changed_handle_is_refused_or_opens_as_itself(checkpoint, data):
    handle = SIGNER.sign(checkpoint.key(), checkpoint)
    changed = data.draw(st.one_of(mutated(handle.encode()).map(lambda raw: raw.decode("latin-1")),
                                  st.just(handle).map(lambda h: h[:-4] + "AAAA")))
    try:
        opened = SIGNER.open(changed)
    except InvalidReceiptHandle:
        return
    assert opened == SIGNER.open(handle)  # base64 skips characters outside its alphabet


@examples(300)
@given(st.one_of(handle_texts, st.builds("{}#{}:{}".format, handle_texts, st.text(max_size=6), st.text(max_size=6))))
@example("unit#\u00b2:3")  # a digit to str.isdigit, not to int()
@example("unit#0:" + "9" * 5000)  # more digits than int() converts
def test_an_inner_message_handle_splits_into_its_unit_index_and_count(handle):
    unit, index, count = receipts.split(handle)
    assert isinstance(unit, str) and 0 <= index and 1 <= count
